//go:build !nodevserver

package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tclient"
)

func devCommand(g *globals) *cobra.Command {
	f := &serveFlags{}
	var (
		temporalPort int
		uiPort       int
		noUI         bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything in one process: embedded Temporal + Web UI, worker, HTTP ingress",
		Long: "Starts an embedded Temporal server (SQLite file under the state dir), the Temporal Web UI,\n" +
			"a worker and the HTTP ingress in one process. State survives restarts. Ctrl-C stops it cleanly.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			for name, p := range map[string]int{"--port": f.port, "--temporal-port": temporalPort, "--ui-port": uiPort} {
				if p < 0 || p > 65535 || (p == 0 && name != "--port") {
					return usageError("%s %d is not a TCP port", name, p)
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			started := time.Now()
			cfg := f.config(g, log)
			parts, err := serve.Open(ctx, cfg)
			if err != nil {
				return failure("%w", err)
			}
			defer parts.Close()
			if err := checkDefinition(ctx, parts, log, cmd.ErrOrStderr()); err != nil {
				return err
			}
			srv, ln, closeDev, err := startDevTemporal(parts, log, temporalPort, uiPort, noUI)
			if err != nil {
				return err
			}
			defer closeDev()
			tc := tclient.Config{Address: srv.FrontendAddress(), Namespace: srv.Namespace(), Logger: log,
				APIKey: srv.APIKey(), Plaintext: true, MetricsHandler: parts.Config.Metrics.SDKHandler()}
			stopTracing, err := startTracing(ctx, parts, &tc)
			if err != nil {
				return failure("%w", err)
			}
			defer stopTracing()
			c, err := tclient.Dial(ctx, tc)
			if err != nil {
				return failure("%w", err)
			}
			defer c.Close()
			out := cmd.OutOrStdout()
			run, err := parts.Start(ctx, c, serve.Roles{Worker: true, Ingress: true}, ln)
			if err != nil {
				return failure("%w", err)
			}
			if err := printDevReady(out, run, srv, parts.Config.StateDir, started); err != nil {
				return err
			}
			return run.Wait(ctx)
		},
	}
	f.bind(cmd, false)
	cmd.Flags().IntVar(&temporalPort, "temporal-port", envInt("FASTAGENT_TEMPORAL_PORT", 7233), "embedded Temporal frontend port [FASTAGENT_TEMPORAL_PORT]")
	cmd.Flags().IntVar(&uiPort, "ui-port", envInt("FASTAGENT_UI_PORT", 8233), "embedded Temporal Web UI port [FASTAGENT_UI_PORT]")
	cmd.Flags().BoolVar(&noUI, "no-ui", false, "do not start the Web UI")
	return cmd
}

// startDevTemporal starts the embedded Temporal server (and Web UI unless
// noUI) with its state, log and key under the state dir. With codec keys
// the API listener is opened first, so the embedded UI can be told its
// codec endpoint; that listener is returned for the ingress. The control
// plane's addresses are added to what tools may never reach.
func startDevTemporal(parts *serve.Parts, log *slog.Logger, temporalPort, uiPort int, noUI bool) (*devserver.Server, net.Listener, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	stateDir := parts.Config.StateDir
	logFile, err := os.OpenFile(filepath.Join(stateDir, "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, nil, failure("open temporal log: %w", err)
	}
	closers = append(closers, func() { _ = logFile.Close() })
	opts := devserver.Options{
		DatabaseFile: filepath.Join(stateDir, "temporal.db"),
		FrontendPort: temporalPort,
		UIPort:       uiPort,
		Logger:       log,
		LogWriter:    logFile,
		KeyFile:      filepath.Join(stateDir, tclient.DevTokenFile),
	}
	if noUI {
		opts.UIPort = -1
	}
	ln, err := devCodecEndpoint(parts, &opts, uiPort, noUI)
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	if ln != nil {
		closers = append(closers, func() { _ = ln.Close() })
	}
	srv, err := devserver.Start(opts)
	if err != nil {
		closeAll()
		return nil, nil, nil, failure("embedded Temporal: %w", err)
	}
	closers = append(closers, srv.Stop)
	// Tools never reach these, whatever their network setting.
	parts.Config.ControlPlane = append(parts.Config.ControlPlane, srv.FrontendAddress(), srv.UIAddress())
	return srv, ln, closeAll, nil
}

// devCodecEndpoint, with codec keys set, opens the API listener and points
// the embedded UI's codec endpoint at it; the UI sends no token, so its
// endpoint carries a key drawn for this run instead.
func devCodecEndpoint(parts *serve.Parts, opts *devserver.Options, uiPort int, noUI bool) (net.Listener, error) {
	cdc, err := codec.FromEnv(os.Getenv)
	if err != nil {
		return nil, failure("%w", err)
	}
	if cdc == nil {
		return nil, nil
	}
	ln, err := serve.Listen(parts.Config.HTTPHost, parts.Config.HTTPPort)
	if err != nil {
		return nil, failure("%w", err)
	}
	opts.CodecEndpoint = "http://" + ln.Addr().String() + "/codec"
	if !noUI {
		key := make([]byte, 16)
		if _, err := rand.Read(key); err != nil {
			_ = ln.Close()
			return nil, failure("dev codec key: %w", err)
		}
		parts.Config.DevCodecKey = hex.EncodeToString(key)
		opts.CodecEndpoint += "/dev/" + parts.Config.DevCodecKey
		parts.Config.DevUIOrigin = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(uiPort))
	}
	return ln, nil
}

// printDevReady prints where everything `fastagent dev` started listens.
func printDevReady(out io.Writer, run *serve.Running, srv *devserver.Server, stateDir string, started time.Time) error {
	api := run.URL
	fmt.Fprintf(out, "fastagent dev ready in %s\n", time.Since(started).Round(time.Millisecond))
	fmt.Fprintf(out, "  API       %s   (POST /invoke, GET /health)\n", api)
	if srv.UIAddress() != "" {
		link, err := srv.UILoginURL()
		if err != nil {
			return failure("%w", err)
		}
		fmt.Fprintf(out, "  Web UI    %s\n            (opens once; `fastagent ui-link` makes another)\n", link)
	}
	fmt.Fprintf(out, "  Temporal  %s   (namespace %s; every call needs the key in %s)\n",
		srv.FrontendAddress(), srv.Namespace(), filepath.Join(stateDir, tclient.DevTokenFile))
	fmt.Fprintf(out, "  State     %s\n", stateDir)
	printToken(out, run)
	fmt.Fprintf(out, "Try: fastagent invoke \"hello\" --session s1 --url %s\n", api)
	return nil
}
