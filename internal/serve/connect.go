package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/tclient"
)

// Temporal says how a runtime reaches Temporal: a client the caller made,
// an embedded development server started in this process, or an address
// (tclient.Config, with the TEMPORAL_* environment already applied).
type Temporal struct {
	Client   client.Client
	Embedded *Embedded
	Dial     tclient.Config
}

// Embedded configures the embedded development server: its state, log and
// key live in the state dir.
type Embedded struct {
	// FrontendPort and UIPort: 0 picks a free port; UIPort -1 runs no Web UI.
	FrontendPort, UIPort int
	// Start starts it: embedserver.Start, which only programs that embed
	// the server link (nil in a build without it).
	Start func(stateDir string, e Embedded, codecEndpoint string, log *slog.Logger) (*EmbeddedServer, error)
}

// EmbeddedServer is a started embedded server.
type EmbeddedServer struct {
	Frontend, Namespace, UI string
	// Login returns a new one-time Web UI login link.
	Login func() (string, error)
	// Key is the per-run key every call to the server needs.
	Key string
	// Stop stops the server.
	Stop func()
}

// Connection is Temporal as Connect reached it. Close releases it (the
// client, then the embedded server).
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

// Connect is the one way a runtime reaches Temporal: it starts the embedded
// server when asked (with codec keys its Web UI decodes through the
// ingress listening on ln, by a key drawn for this run), dials with the
// codec, the SDK metrics and the tracing interceptor of p.Config, and adds
// the frontend (and UI) to the addresses tools may never reach.
func (p *Parts) Connect(ctx context.Context, t Temporal, ln net.Listener) (*Connection, error) {
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
	if p.Config.Codec == nil {
		cdc, err := codec.FromEnv(os.Getenv)
		if err != nil {
			return nil, err
		}
		p.Config.Codec = cdc
	}
	cfg := t.Dial
	if t.Embedded != nil {
		codecEndpoint, err := p.devCodecEndpoint(ln, t.Embedded.UIPort)
		if err != nil {
			return nil, err
		}
		if t.Embedded.Start == nil {
			return nil, errors.New("this build has no embedded Temporal server (tag nodevserver); connect to a Temporal server by address")
		}
		emb, err := t.Embedded.Start(p.Config.StateDir, *t.Embedded, codecEndpoint, p.Config.Logger)
		if err != nil {
			return nil, fmt.Errorf("embedded Temporal: %w", err)
		}
		conn.closers = append(conn.closers, emb.Stop)
		conn.Embedded = emb
		if codecEndpoint != "" && emb.UI != "" {
			p.Config.DevUIOrigin = "http://" + emb.UI
		}
		cfg = tclient.Config{Address: emb.Frontend, Namespace: emb.Namespace, APIKey: emb.Key, Plaintext: true}
		p.Config.ControlPlane = append(p.Config.ControlPlane, emb.Frontend, emb.UI)
	} else {
		p.Config.ControlPlane = append(p.Config.ControlPlane, cfg.Address)
	}
	cfg.Logger = p.Config.Logger
	if p.Config.Codec != nil {
		cfg.Codec = p.Config.Codec
	}
	if p.Config.Metrics != nil {
		cfg.MetricsHandler = p.Config.Metrics.SDKHandler()
	}
	if icpt, err := p.Config.Tracing.Interceptor(); err != nil {
		return nil, err
	} else if icpt != nil {
		cfg.Interceptors = append(cfg.Interceptors, icpt)
	}
	c, err := tclient.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conn.Client = c
	conn.closers = append(conn.closers, c.Close)
	ok = true
	return conn, nil
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
	p.Config.DevCodecKey = hex.EncodeToString(key)
	return "http://" + ln.Addr().String() + "/codec/dev/" + p.Config.DevCodecKey, nil
}
