// Command fastagent-devserver is the Temporal development server of
// fastagent: a Temporal server on a SQLite file, its Web UI behind a
// one-time login link, every frontend call locked by a per-run key. It is
// a module of its own, so that fastagent — its CLI, its workers and every
// program importing its packages — links none of the Temporal server and
// stays on the current Temporal SDK; `fastagent dev`, fastagent.Start with
// an embedded server and the tests start it as a child process, the way
// the Temporal CLI's dev server runs.
//
// Run by hand, it serves until SIGINT or SIGTERM, with its state (the
// SQLite file and the key) in --state-dir:
//
//	fastagent-devserver [--state-dir .fastagent] [--port 7233] [--ui-port 8233]
//
// As a child process (--config -), it reads its configuration as one JSON
// line on stdin (the key travels there, never on the command line or in
// the environment), answers one request per further line, and stops when
// stdin closes (its parent died or let it go).
//
// Either way it prints one JSON line on stdout once it serves:
//
//	{"protocol":1,"ready":{"frontend":"127.0.0.1:7233","namespace":"default","ui":"127.0.0.1:8233","login":"http://…/login?code=…","keyFile":"…"}}
//
// or {"protocol":1,"error":"…"} when it cannot start (exit status 1).
// Its server log goes to stderr.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fastagent/fastagent/cmd/fastagent-devserver/internal/devserver"
)

// protocol is the version of the stdin/stdout protocol; the parent refuses
// a binary speaking another.
const protocol = 1

// config is the configuration a parent sends as the first line on stdin.
type config struct {
	DatabaseFile  string         `json:"databaseFile,omitempty"`
	IP            string         `json:"ip,omitempty"`
	FrontendPort  int            `json:"frontendPort,omitempty"`
	UIPort        int            `json:"uiPort,omitempty"`
	Namespace     string         `json:"namespace,omitempty"`
	LogLevel      string         `json:"logLevel,omitempty"`
	Untuned       bool           `json:"untuned,omitempty"`
	DynamicConfig map[string]any `json:"dynamicConfig,omitempty"`
	TLS           *devserver.TLS `json:"tls,omitempty"`
	CodecEndpoint string         `json:"codecEndpoint,omitempty"`
	APIKey        string         `json:"apiKey,omitempty"`
	KeyFile       string         `json:"keyFile,omitempty"`
}

// ready is what the ready line tells.
type ready struct {
	Frontend  string `json:"frontend"`
	Namespace string `json:"namespace"`
	UI        string `json:"ui,omitempty"`
	Login     string `json:"login,omitempty"`
	KeyFile   string `json:"keyFile,omitempty"`
}

// message is one line on stdout.
type message struct {
	Protocol int              `json:"protocol"`
	Ready    *ready           `json:"ready,omitempty"`
	Error    string           `json:"error,omitempty"`
	Actions  map[string]int64 `json:"actions,omitempty"`
}

// request is one line on stdin after the configuration.
type request struct {
	// Actions asks for the billable actions the server counted in this
	// namespace ("" = the server's).
	Actions *string `json:"actions,omitempty"`
}

func main() {
	harden()
	out := json.NewEncoder(os.Stdout)
	if err := run(os.Args[1:], os.Stdin, out); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		_ = out.Encode(message{Protocol: protocol, Error: err.Error()})
		fmt.Fprintln(os.Stderr, "fastagent-devserver:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, out *json.Encoder) error {
	cfg, fromStdin, in, err := parse(args, stdin)
	if err != nil {
		return err
	}
	opts, err := cfg.options()
	if err != nil {
		return err
	}
	srv, err := devserver.Start(opts)
	if err != nil {
		return err
	}
	defer srv.Stop()
	r := &ready{Frontend: srv.FrontendAddress(), Namespace: srv.Namespace(), UI: srv.UIAddress(), KeyFile: opts.KeyFile}
	if r.Login, err = srv.UILoginURL(); err != nil {
		return err
	}
	if err := out.Encode(message{Protocol: protocol, Ready: r}); err != nil {
		return fmt.Errorf("write the ready line: %w", err)
	}
	if !fromStdin {
		fmt.Fprintf(os.Stderr, "fastagent-devserver: Temporal at %s (namespace %s; every call needs the key in %s)\n", r.Frontend, r.Namespace, r.KeyFile)
		if r.Login != "" {
			fmt.Fprintf(os.Stderr, "fastagent-devserver: Web UI %s (opens once; `fastagent ui-link --ui-port %d` makes another)\n", r.Login, opts.UIPort)
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	closed := make(chan struct{})
	if fromStdin {
		go func() {
			defer close(closed)
			serveRequests(in, out, srv)
		}()
	}
	select {
	case <-stop:
	case <-closed: // the parent closed stdin or died
	case err := <-srv.Failed():
		return err
	}
	return nil
}

// serveRequests answers one request per line until stdin ends.
func serveRequests(in *bufio.Reader, out *json.Encoder, srv *devserver.Server) {
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var req request
			resp := message{Protocol: protocol}
			switch {
			case json.Unmarshal(line, &req) != nil:
				resp.Error = "not a request: " + strings.TrimSpace(string(line))
			case req.Actions != nil:
				resp.Actions = srv.Actions(*req.Actions)
				if resp.Actions == nil {
					resp.Actions = map[string]int64{}
				}
			default:
				resp.Error = "unknown request"
			}
			_ = out.Encode(resp) // a parent gone: stdin ends next
		}
		if err != nil {
			return
		}
	}
}

// parse reads the flags, or the configuration on stdin with --config -.
func parse(args []string, stdin io.Reader) (cfg config, fromStdin bool, in *bufio.Reader, err error) {
	fs := flag.NewFlagSet("fastagent-devserver", flag.ContinueOnError)
	configFile := fs.String("config", "", "read the configuration (JSON) from this file, or from stdin's first line with -; with -, stop when stdin closes")
	state := fs.String("state-dir", ".fastagent", "where the SQLite file (temporal.db) and the key (temporal-token, mode 0600) live")
	fs.StringVar(&cfg.IP, "ip", "127.0.0.1", "address the frontend and the Web UI listen on")
	fs.IntVar(&cfg.FrontendPort, "port", 7233, "frontend (gRPC) port; 0 picks a free one")
	fs.IntVar(&cfg.UIPort, "ui-port", 8233, "Web UI port; 0 picks a free one, -1 runs no Web UI")
	fs.StringVar(&cfg.Namespace, "namespace", "default", "namespace created at start")
	fs.StringVar(&cfg.CodecEndpoint, "codec-endpoint", "", "codec server the Web UI decodes payloads with")
	fs.StringVar(&cfg.LogLevel, "log-level", "warn", "server log level: debug, info, warn or error")
	fs.BoolVar(&cfg.Untuned, "untuned", false, "keep Temporal's stock dynamic configuration (no latency tuning)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: fastagent-devserver [flags]\n\nThe Temporal development server of fastagent (normally started by `fastagent dev`).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, false, nil, err
	}
	if fs.NArg() > 0 {
		return cfg, false, nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *configFile == "" {
		cfg.DatabaseFile = filepath.Join(*state, "temporal.db")
		cfg.KeyFile = filepath.Join(*state, "temporal-token")
		return cfg, false, nil, nil
	}
	set := 0
	fs.Visit(func(*flag.Flag) { set++ })
	if set > 1 {
		return cfg, false, nil, errors.New("--config takes the whole configuration: give no other flag")
	}
	var raw []byte
	in = bufio.NewReader(stdin)
	if *configFile == "-" {
		raw, err = in.ReadBytes('\n')
		if err != nil && (!errors.Is(err, io.EOF) || len(raw) == 0) {
			return cfg, false, nil, fmt.Errorf("read the configuration from stdin: %w", err)
		}
	} else if raw, err = os.ReadFile(*configFile); err != nil {
		return cfg, false, nil, fmt.Errorf("read the configuration: %w", err)
	}
	cfg, err = decodeConfig(raw)
	return cfg, *configFile == "-", in, err
}

// decodeConfig decodes the JSON configuration, refusing unknown fields and
// keeping numbers of the dynamic config as integers where they are.
func decodeConfig(raw []byte) (config, error) {
	var cfg config
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("the configuration: %w", err)
	}
	for k, v := range cfg.DynamicConfig {
		cfg.DynamicConfig[k] = numbers(v)
	}
	return cfg, nil
}

// numbers turns json.Numbers into ints (or float64s when not whole), as
// the server's dynamic config converters expect.
func numbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return int(i)
		}
		f, _ := v.Float64()
		return f
	case []any:
		for i := range v {
			v[i] = numbers(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = numbers(v[k])
		}
	}
	return v
}

// options are the server's options for cfg.
func (cfg config) options() (devserver.Options, error) {
	var level slog.Level
	if cfg.LogLevel != "" {
		if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
			return devserver.Options{}, fmt.Errorf("log level %q: %w", cfg.LogLevel, err)
		}
	} else {
		level = slog.LevelWarn
	}
	return devserver.Options{
		DatabaseFile: cfg.DatabaseFile, IP: cfg.IP, FrontendPort: cfg.FrontendPort, UIPort: cfg.UIPort,
		Namespace: cfg.Namespace, LogWriter: os.Stderr, LogLevel: level,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Untuned: cfg.Untuned, DynamicConfig: cfg.DynamicConfig, TLS: cfg.TLS,
		CodecEndpoint: cfg.CodecEndpoint, APIKey: cfg.APIKey, KeyFile: cfg.KeyFile,
	}, nil
}
