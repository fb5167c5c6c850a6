package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/tclient"
)

// Temporal says how a runtime reaches Temporal: a client the caller made,
// the development server started as a child process, or an address
// (tclient.Config, with the TEMPORAL_* environment already applied).
type Temporal struct {
	Client   client.Client
	Embedded *Embedded
	Dial     tclient.Config
}

// Embedded configures the development server (the fastagent-devserver
// program, run as a child process: internal/devserver): its state
// (temporal.db), log (temporal.log) and key (temporal-token) live in the
// state dir.
type Embedded struct {
	// FrontendPort and UIPort: 0 picks a free port; UIPort -1 runs no Web UI.
	FrontendPort, UIPort int
}

// EmbeddedServer is a started development server.
type EmbeddedServer struct {
	Frontend, Namespace, UI string
	// Login returns a new one-time Web UI login link.
	Login func() (string, error)
	// Key is the per-run key every call to the server needs.
	Key string
	// Exited is closed when the server's process exited (Stop, or it
	// died); Err then says how.
	Exited <-chan struct{}
	Err    func() error
	// Stop stops the server.
	Stop func()
}

// startEmbedded starts the development server with its state, log and key
// in stateDir; a codecEndpoint configures its Web UI's codec server.
func startEmbedded(ctx context.Context, stateDir string, e Embedded, codecEndpoint string, log *slog.Logger) (*EmbeddedServer, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(stateDir, "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the server log: %w", err)
	}
	defer logFile.Close() // the child writes to its own copy
	srv, err := devserver.Start(ctx, devserver.Options{
		DatabaseFile: filepath.Join(stateDir, "temporal.db"),
		FrontendPort: e.FrontendPort, UIPort: e.UIPort, Logger: log, LogWriter: logFile,
		CodecEndpoint: codecEndpoint, KeyFile: filepath.Join(stateDir, tclient.DevTokenFile),
	})
	if err != nil {
		if devserver.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("%w (its log: %s)", err, logFile.Name())
	}
	return &EmbeddedServer{
		Frontend: srv.FrontendAddress(), Namespace: srv.Namespace(), UI: srv.UIAddress(), Login: srv.UILoginURL,
		Key: srv.APIKey(), Exited: srv.Exited(), Err: srv.Err, Stop: srv.Stop,
	}, nil
}

// Connection is Temporal as Start reached it (connect). Close releases it
// (the client, then the embedded server).
type Connection struct {
	Client   client.Client
	Embedded *EmbeddedServer
	closers  []func()
}

// Close releases the connection; it is idempotent.
func (c *Connection) Close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
}

var warmBuildChecksum sync.Once

// connect is the one way a runtime reaches Temporal (Parts.Start): it
// starts the embedded server when asked (with codec keys its Web UI decodes
// through the ingress listening on ln, by a key drawn for this run), dials
// with the codec, the SDK metrics and the tracing interceptor of p, and
// adds the embedded frontend (and UI) to the addresses tools may never
// reach (a dialled address is added by Assemble).
func (p *Parts) connect(ctx context.Context, t Temporal, ln net.Listener) (*Connection, error) {
	conn := &Connection{}
	if t.Client != nil {
		conn.Client = t.Client
		return conn, nil
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	if p.Config.Roles.Worker {
		go warmBuildChecksum.Do(func() {
			// The SDK names a worker without a build ID by the MD5 of its
			// executable (≈ 100 MB: a few hundred ms), computed once per
			// process when the first worker is made: compute it now, beside
			// the server's start and the dial, rather than after them.
			_ = (&workflow.Info{}).GetBinaryChecksum()
		})
	}
	if err := p.codecFromEnv(); err != nil {
		return nil, err
	}
	cfg := t.Dial
	if t.Embedded != nil {
		codecEndpoint, err := p.devCodecEndpoint(ln, t.Embedded.UIPort)
		if err != nil {
			return nil, err
		}
		emb, err := startEmbedded(ctx, p.Config.StateDir, *t.Embedded, codecEndpoint, p.Config.Logger)
		if err != nil {
			return nil, fmt.Errorf("embedded Temporal: %w", err)
		}
		conn.closers = append(conn.closers, emb.Stop)
		conn.Embedded = emb
		if codecEndpoint != "" && emb.UI != "" {
			p.devUIOrigin = "http://" + emb.UI
		}
		cfg = tclient.Config{Address: emb.Frontend, Namespace: emb.Namespace, APIKey: emb.Key, Plaintext: true}
		p.Config.ControlPlane = append(p.Config.ControlPlane, emb.Frontend, emb.UI)
	}
	c, err := p.dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conn.Client = c
	conn.closers = append(conn.closers, c.Close)
	ok = true
	return conn, nil
}

// codecFromEnv reads FASTAGENT_CODEC_KEYS into Config.Codec when unset.
func (p *Parts) codecFromEnv() error {
	if p.Config.Codec != nil {
		return nil
	}
	cdc, err := codec.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	p.Config.Codec = cdc
	return nil
}

// dial dials d with the codec, the SDK metrics and the tracing
// interceptor of p.
func (p *Parts) dial(ctx context.Context, d tclient.Config) (client.Client, error) {
	c := p.Config
	d.Logger = c.Logger
	if c.Codec != nil {
		d.Codec = c.Codec
	}
	if c.Metrics != nil {
		d.MetricsHandler = c.Metrics.SDKHandler()
	}
	if icpt, err := p.tracing.Interceptor(); err != nil {
		return nil, err
	} else if icpt != nil {
		d.Interceptors = append(d.Interceptors, icpt)
	}
	cl, err := tclient.Dial(ctx, d)
	if err != nil {
		return nil, err
	}
	// The plugin's workers run on this client: they check it encodes with
	// the codec (Plugin, ClientEncoded).
	p.clientCodec = d.Codec
	return cl, nil
}

// devCodecEndpoint is the embedded Web UI's codec endpoint on the ingress
// listening on ln ("" without codec keys, an ingress or a UI). The UI sends
// no token, so the endpoint carries a key drawn for this run.
func (p *Parts) devCodecEndpoint(ln net.Listener, uiPort int) (string, error) {
	if p.Config.Codec == nil || ln == nil || uiPort < 0 {
		return "", nil
	}
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("dev codec key: %w", err)
	}
	p.devCodecKey = hex.EncodeToString(key)
	return "http://" + ln.Addr().String() + "/codec/dev/" + p.devCodecKey, nil
}
