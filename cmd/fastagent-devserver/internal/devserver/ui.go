package devserver

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uirpc "github.com/temporalio/ui-server/v2/server/rpc"
	uiserveroptions "github.com/temporalio/ui-server/v2/server/server_options"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"

	"github.com/fastagent/fastagent/cmd/fastagent-devserver/internal/uigate"
)

// webUI is the Web UI: the UI server on an internal loopback port and the
// gate on the public one.
//
// Why a reverse proxy rather than a handler wrapped around the UI server:
// ui-server's Server keeps its echo instance unexported and only listens
// itself (Start binds host:port), so nothing can be put in front of it
// in-process. It therefore listens on a free loopback port, holds no
// credential, and gets none of the settings that matter (no codec
// endpoint): reached directly it serves static files and calls the
// frontend without a credential, which the frontend refuses. The gate adds
// the credential and the codec endpoint for a signed-in browser only.
type webUI struct {
	ui    *uiserver.Server
	inner string // the UI server's host:port
	gate  *http.Server
	conn  *grpc.ClientConn
}

// errUIStopped is what ui-server's Start returns after Stop.
var errUIStopped = errors.New("http: Server closed")

// startUI starts the UI server and the gate on opts.IP:opts.UIPort.
func startUI(opts Options, frontendAddr string) (*webUI, error) {
	innerPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	var uiTLS uiconfig.TLS
	if t := opts.TLS; t != nil {
		uiTLS = uiconfig.TLS{CaFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName, EnableHostVerification: true}
	}
	// The gate's own connection, for the raw history download, dials the
	// frontend exactly as the UI server does.
	tlsConf, err := uirpc.CreateTLSConfig(frontendAddr, &uiTLS)
	if err != nil {
		return nil, fmt.Errorf("devserver: web ui tls: %w", err)
	}
	conn, err := uirpc.Dial(frontendAddr, tlsConf)
	if err != nil {
		return nil, fmt.Errorf("devserver: web ui connection: %w", err)
	}
	w := &webUI{conn: conn}
	w.ui = uiserver.NewServer(uiserveroptions.WithConfigProvider(&uiconfig.Config{
		TLS:                 uiTLS,
		Host:                "127.0.0.1",
		Port:                innerPort,
		TemporalGRPCAddress: frontendAddr,
		EnableUI:            true,
		DefaultNamespace:    opts.Namespace,
		CORS:                uiconfig.CORS{CookieInsecure: true},
		HideLogs:            true,
	}))
	ui := w.ui
	go func() {
		// Start blocks until Stop; an error here means the port was lost.
		if err := ui.Start(); err != nil && !errors.Is(err, errUIStopped) {
			opts.Logger.Error("temporal web ui stopped", "error", err)
		}
	}()
	w.inner = net.JoinHostPort("127.0.0.1", strconv.Itoa(innerPort))
	if err := waitListening(w.inner, 10*time.Second); err != nil {
		w.stop()
		return nil, err
	}
	gate, err := uigate.New(uigate.Config{
		Key:           opts.APIKey,
		Upstream:      &url.URL{Scheme: "http", Host: w.inner},
		Port:          opts.UIPort,
		Home:          "/namespaces/" + url.PathEscape(opts.Namespace) + "/workflows",
		CodecEndpoint: opts.CodecEndpoint,
		History:       uigate.RawHistory(workflowservice.NewWorkflowServiceClient(conn), opts.APIKey),
		Logger:        opts.Logger,
	})
	if err != nil {
		w.stop()
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(opts.IP, strconv.Itoa(opts.UIPort)))
	if err != nil {
		w.stop()
		return nil, fmt.Errorf("devserver: temporal ui port: %w (choose another with --ui-port)", err)
	}
	w.gate = &http.Server{Handler: gate, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := w.gate.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			opts.Logger.Error("temporal web ui gate stopped", "error", err)
		}
	}()
	return w, nil
}

func (w *webUI) stop() {
	if w.gate != nil {
		_ = w.gate.Close() // stopping: nothing left to do with an error
	}
	w.ui.Stop()
	_ = w.conn.Close()
}
