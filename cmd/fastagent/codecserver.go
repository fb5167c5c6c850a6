package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/serve"
)

// newCodecServer is `fastagent codec-server`: Temporal's remote codec
// protocol on its own listener, for the Web UI and `temporal
// --codec-endpoint`, without a worker or an ingress.
func newCodecServer(g *globals) *cobra.Command {
	var (
		listen, tokensFile string
		origins, hosts     []string
	)
	cmd := &cobra.Command{
		Use:   "codec-server",
		Short: "Serve the payload codec (POST /codec/encode, /codec/decode) for the Temporal Web UI and CLI",
		Long: "Serves Temporal's remote codec protocol with the keys of FASTAGENT_CODEC_KEYS / FASTAGENT_CODEC_KEY_FILE,\n" +
			"behind the API tokens (a token with the codec or admin right), with CORS for the Web UI's origins.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return usageError("--listen %q: want host:port", listen)
			}
			cfg := serve.CodecServerConfig{
				Host: host, AllowedHosts: hosts, TokensFile: tokensFile,
				APIToken: os.Getenv("FASTAGENT_API_TOKEN"), APITokens: os.Getenv("FASTAGENT_API_TOKENS"),
			}
			if cmd.Flags().Changed("ui-origin") {
				cfg.Origins = origins
			}
			h, err := serve.CodecServer(cfg)
			if err != nil {
				return failure("%w", err)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return failure("codec server: listen on %s: %w", listen, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(cmd.OutOrStdout(), "fastagent codec server  http://%s/codec  (POST /codec/encode, /codec/decode)\n", ln.Addr())
			log.Info("codec server listening", "addr", ln.Addr().String())
			return serve.ServeHTTP(ctx, ln, h, nil)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", envOr("FASTAGENT_CODEC_LISTEN", "127.0.0.1:8788"), "listen address host:port [FASTAGENT_CODEC_LISTEN]")
	fl.StringSliceVar(&origins, "ui-origin", nil, "Web UI origin allowed to call it from a browser (CORS), e.g. https://cloud.temporal.io; repeatable (default FASTAGENT_CODEC_ORIGINS)")
	fl.StringSliceVar(&hosts, "allowed-host", nil, "Host names served besides loopback and the listen host (DNS rebinding defence)")
	fl.StringVar(&tokensFile, "tokens-file", os.Getenv("FASTAGENT_TOKENS_FILE"), "API tokens file: lines principal:rights:sha256hex [FASTAGENT_TOKENS_FILE]")
	return cmd
}
