package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/ingress"
)

// EnvCodecOrigins lists the Web UI origins (comma-separated) allowed to call
// the codec server from a browser.
const EnvCodecOrigins = "FASTAGENT_CODEC_ORIGINS"

// opsRoutes mounts the codec server (when codec keys are configured) and
// GET /metrics (when Config.Metrics is set) on the ingress listening on host.
func (p *Parts) opsRoutes(in *ingress.Server, host string) error {
	cdc := p.Config.Codec
	if cdc == nil {
		var err error
		if cdc, err = codec.FromEnv(os.Getenv); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	if cdc != nil {
		in.Codec = cdc.Handler()
		in.CodecOrigins = p.Config.CodecOrigins
		if in.CodecOrigins == nil {
			in.CodecOrigins = splitOrigins(os.Getenv(EnvCodecOrigins))
		}
		if p.devUIOrigin != "" && ingress.IsLoopback(host) {
			in.DevUIOrigin = p.devUIOrigin
			in.DevCodecKey = p.devCodecKey
		}
		p.Config.Logger.Info("codec server on the ingress", "routes", "POST /codec/encode, /codec/decode", "key", cdc.KeyID(), "origins", in.CodecOrigins)
	}
	if p.Config.Metrics != nil {
		in.Metrics = p.Config.Metrics.Handler()
	}
	return nil
}

// startMetrics serves GET /metrics and GET /health without a token on
// Config.MetricsAddr (nothing when unset or without Config.Metrics); the
// returned stop shuts it down. /health is the worker's probe (a worker
// serves no other HTTP): 503 "starting" until the worker role's workers
// started, then 200 "ok"; it says nothing else.
func (p *Parts) startMetrics() (stop func(), err error) {
	c := p.Config
	if c.MetricsAddr == "" || c.Metrics == nil {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", c.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener (FASTAGENT_METRICS_ADDR): %w", err)
	}
	srv := &http.Server{Handler: p.metricsMux(), ReadHeaderTimeout: 10 * time.Second}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "error", err)
		}
	}()
	log.Info("metrics served", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// metricsMux is what the metrics listener serves: GET /metrics and the
// worker's probe GET /health.
func (p *Parts) metricsMux() http.Handler {
	c := p.Config
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", c.Metrics.Handler())
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if c.Roles.Worker && !p.workersUp.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("starting"))
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}
