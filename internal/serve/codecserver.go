package serve

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/fastagent/fastagent/internal/codec"
)

// CodecServerConfig configures a standalone codec server.
type CodecServerConfig struct {
	// Codec is the payload codec (nil reads FASTAGENT_CODEC_KEYS /
	// FASTAGENT_CODEC_KEY_FILE).
	Codec *codec.Codec
	// Tokens: as Config's APIToken, APITokens and TokensFile; at least one
	// is required (a token with the codec or admin right calls it).
	APIToken, APITokens, TokensFile string
	// Origins are the Web UI origins allowed to call it from a browser
	// (nil reads FASTAGENT_CODEC_ORIGINS).
	Origins []string
	// Host is the listen host; AllowedHosts the Host names served beside
	// it and the loopback names (a wildcard host without them: any).
	Host         string
	AllowedHosts []string
}

// ErrNoCodecKeys is returned by CodecServer when no key is configured.
var ErrNoCodecKeys = errors.New("codec server: no codec keys: set FASTAGENT_CODEC_KEYS or FASTAGENT_CODEC_KEY_FILE")

// CodecServer returns the handler of `fastagent codec-server`: Temporal's
// remote codec protocol (POST /codec/encode, /codec/decode) and GET
// /health, behind the API tokens, with CORS for the Web UI's origins.
func CodecServer(cfg CodecServerConfig) (http.Handler, error) {
	cdc := cfg.Codec
	if cdc == nil {
		var err error
		if cdc, err = codec.FromEnv(os.Getenv); err != nil {
			return nil, fmt.Errorf("codec server: %w", err)
		}
		if cdc == nil {
			return nil, ErrNoCodecKeys
		}
	}
	toks, err := Config{APIToken: cfg.APIToken, APITokens: cfg.APITokens, TokensFile: cfg.TokensFile}.Tokens()
	if err != nil {
		return nil, fmt.Errorf("codec server: %w", err)
	}
	if toks.Len() == 0 {
		return nil, errors.New("codec server: no API tokens: set FASTAGENT_API_TOKEN or FASTAGENT_API_TOKENS / --tokens-file (a token with the codec right)")
	}
	origins := cfg.Origins
	if origins == nil {
		origins = splitOrigins(os.Getenv(EnvCodecOrigins))
	}
	srv := newIngress(nil, nil)
	srv.Codec, srv.CodecOrigins, srv.Tokens = cdc.Handler(), origins, toks
	srv.AllowedHosts, srv.AnyHost = Config{AllowedHosts: cfg.AllowedHosts}.hostPolicy(cfg.Host)
	return srv.CodecHandler(), nil
}

// splitOrigins parses a comma-separated origin list (trailing slashes cut).
func splitOrigins(s string) []string {
	var out []string
	for _, o := range strings.Split(s, ",") {
		if o = strings.TrimRight(strings.TrimSpace(o), "/"); o != "" {
			out = append(out, o)
		}
	}
	return out
}
