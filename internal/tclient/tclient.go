// Package tclient dials Temporal from configuration shared by every command:
// a local or self-hosted cluster (address + namespace) or Temporal Cloud
// (API key, or mTLS client certificate), with payloads and failure messages
// encrypted when codec keys are configured. Secrets come from the environment only.
package tclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"

	"github.com/fastagent/fastagent/internal/codec"
)

// Config says how to reach Temporal.
type Config struct {
	Address   string // host:port; default 127.0.0.1:7233
	Namespace string // default "default"
	// APIKey authenticates to Temporal Cloud or to `fastagent dev`'s
	// embedded server (env TEMPORAL_API_KEY): every call carries
	// "authorization: Bearer <APIKey>". It implies TLS unless Plaintext is
	// set.
	APIKey string
	// Plaintext sends APIKey without TLS (env TEMPORAL_TLS=false), for a
	// loopback server such as `fastagent dev`'s, which speaks plaintext.
	Plaintext bool
	// TLSCertFile and TLSKeyFile enable mTLS (env TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY).
	TLSCertFile string
	TLSKeyFile  string
	// TLS forces TLS without client certificates (env TEMPORAL_TLS=true).
	TLS bool
	// TLSCAFile trusts this CA bundle instead of the system's (env
	// TEMPORAL_TLS_CA), for self-hosted clusters with a private CA;
	// TLSServerName overrides the name checked in the server's certificate
	// (env TEMPORAL_TLS_SERVER_NAME). Either implies TLS.
	TLSCAFile     string
	TLSServerName string
	Logger        *slog.Logger
	// Codec encrypts every payload and failure message (see package
	// codec). Nil reads it from FASTAGENT_CODEC_KEYS /
	// FASTAGENT_CODEC_KEY_FILE, so every process of a deployment encrypts
	// alike; Plain skips that (tests that read raw history).
	Codec *codec.Codec
	Plain bool
	// MetricsHandler receives the SDK's metrics (nil: none).
	MetricsHandler client.MetricsHandler
	// Interceptors wrap the client's calls; those that are also worker
	// interceptors (tracing) wrap workers built on the client too.
	Interceptors []interceptor.ClientInterceptor
	// Gzip says whether gRPC requests are compressed (env
	// TEMPORAL_GRPC_GZIP=true or false); nil: not to a loopback address,
	// as the SDK does (gzip) to any other.
	Gzip *bool
}

// gzipOn says whether c's requests are compressed.
func gzipOn(c Config) bool {
	if c.Gzip != nil {
		return *c.Gzip
	}
	host, _, err := net.SplitHostPort(c.Address)
	return err != nil || !isLoopback(host)
}

// FromEnv fills unset fields from TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_API_KEY, TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY, TEMPORAL_TLS_CA,
// TEMPORAL_TLS_SERVER_NAME, TEMPORAL_TLS (true forces TLS, false sends
// an API key in plaintext) and TEMPORAL_GRPC_GZIP (true or false:
// compress requests or not; unset: not to a loopback address).
func (c Config) FromEnv() Config {
	set := func(v *string, name string) {
		if *v == "" {
			*v = os.Getenv(name)
		}
	}
	set(&c.Address, "TEMPORAL_ADDRESS")
	set(&c.Namespace, "TEMPORAL_NAMESPACE")
	set(&c.APIKey, "TEMPORAL_API_KEY")
	set(&c.TLSCertFile, "TEMPORAL_TLS_CERT")
	set(&c.TLSKeyFile, "TEMPORAL_TLS_KEY")
	set(&c.TLSCAFile, "TEMPORAL_TLS_CA")
	set(&c.TLSServerName, "TEMPORAL_TLS_SERVER_NAME")
	if v, err := strconv.ParseBool(os.Getenv("TEMPORAL_GRPC_GZIP")); err == nil && c.Gzip == nil {
		c.Gzip = &v
	}
	switch os.Getenv("TEMPORAL_TLS") {
	case "true":
		c.TLS = true
	case "false":
		c.Plaintext = true
	}
	return c
}

// DevTokenFile is the file in the state dir where `fastagent dev` writes
// (0600) the credential its embedded Temporal server demands on every call.
const DevTokenFile = "temporal-token"

// WithDevToken returns c with the credential of a running `fastagent dev`
// whose state dir is stateDir: read from <stateDir>/temporal-token and sent
// in plaintext, when c configures no credential and no TLS of its own and
// dials a loopback address. Otherwise (or without the file) c is returned
// as it is, so a cluster elsewhere never receives this token.
func (c Config) WithDevToken(stateDir string) Config {
	if c.APIKey != "" || c.TLS || c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCAFile != "" || c.TLSServerName != "" {
		return c
	}
	addr := c.Address
	if addr == "" {
		addr = "127.0.0.1:7233"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil || !isLoopback(host) {
		return c
	}
	b, err := os.ReadFile(filepath.Join(stateDir, DevTokenFile))
	if err != nil {
		return c
	}
	if tok := strings.TrimSpace(string(b)); tok != "" {
		c.APIKey, c.Plaintext = tok, true
	}
	return c
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Dial connects and checks the connection.
func Dial(ctx context.Context, c Config) (client.Client, error) {
	if c.Address == "" {
		c.Address = "127.0.0.1:7233"
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	opts := client.Options{
		HostPort:  c.Address,
		Namespace: c.Namespace,
		Logger:    logger(c.Logger),
	}
	// gRPC requests to a loopback server go uncompressed (the SDK gzips
	// them by default): a gzip writer's reset and deflate per call were
	// ≈ 8 % of the bench process's CPU, for nothing on loopback. Over a
	// network the SDK's default stays, since the server then compresses
	// its answers too (histories of replays, polls).
	if !gzipOn(c) {
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	}
	if c.MetricsHandler != nil {
		opts.MetricsHandler = c.MetricsHandler
	}
	opts.Interceptors = c.Interceptors
	if c.Codec == nil && !c.Plain {
		var err error
		if c.Codec, err = codec.FromEnv(os.Getenv); err != nil {
			return nil, fmt.Errorf("temporal: payload codec: %w", err)
		}
	}
	if c.Codec != nil && !c.Plain {
		opts.DataConverter = c.Codec.DataConverter()
		// Error messages (a provider's answer, a hook's error) are as
		// private as payloads: encrypted too. Workers built on the client
		// inherit both converters.
		opts.FailureConverter = c.Codec.FailureConverter()
		// The client says it encodes (codec.OnClient).
		opts.Interceptors = append(append([]interceptor.ClientInterceptor{}, opts.Interceptors...), c.Codec.Marker())
	}
	if err := credentials(&opts, c); err != nil {
		return nil, err
	}
	if t := opts.ConnectionOptions.TLS; t != nil {
		t.MinVersion = tls.VersionTLS12
		t.ServerName = c.TLSServerName
		if c.TLSCAFile != "" {
			pem, err := os.ReadFile(c.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("temporal: read CA bundle (TEMPORAL_TLS_CA): %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("temporal: TEMPORAL_TLS_CA %s holds no PEM certificate", c.TLSCAFile)
			}
			t.RootCAs = pool
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cl, err := client.DialContext(dctx, opts)
	if err != nil {
		return nil, fmt.Errorf("temporal: cannot reach %s (namespace %s): %w; %s", c.Address, c.Namespace, err, hint(err, c, opts.ConnectionOptions.TLS != nil))
	}
	return cl, nil
}

// credentials sets the API key and the TLS mode of opts from c: an API key
// implies TLS unless Plaintext; a client certificate may go with an API key
// (a frontend that wants both).
func credentials(opts *client.Options, c Config) error {
	if c.Plaintext && (c.TLS || c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCAFile != "" || c.TLSServerName != "") {
		return errors.New("temporal: TEMPORAL_TLS=false (plaintext) contradicts TEMPORAL_TLS_CERT/KEY/CA/SERVER_NAME: set one or the other")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("temporal: TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY go together: set both (client certificate and its key) or neither")
	}
	if c.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(c.APIKey)
	}
	switch {
	case c.Plaintext:
		opts.ConnectionOptions.TLSDisabled = true
	case c.TLSCertFile != "":
		cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("temporal: load client certificate (TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY): %w", err)
		}
		opts.ConnectionOptions.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	case c.APIKey != "" || c.TLS || c.TLSCAFile != "" || c.TLSServerName != "":
		opts.ConnectionOptions.TLS = &tls.Config{}
	}
	return nil
}

// hint says what to change for a failed dial, reading the TLS failure the
// error carries.
func hint(err error, c Config, useTLS bool) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "unknown authority"):
		return "the server's certificate is not signed by a CA this process trusts: set TEMPORAL_TLS_CA to the PEM bundle of the CA that signed it"
	case strings.Contains(msg, "certificate is valid for") || strings.Contains(msg, "certificate is not valid for") ||
		strings.Contains(msg, "doesn't contain any IP SANs"):
		return "the server's certificate does not name the address dialled: set TEMPORAL_TLS_SERVER_NAME to a name it holds"
	case strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate"):
		if c.TLSCertFile == "" {
			return "the server requires a client certificate (mTLS): set TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY"
		}
		return "the server refused the client certificate in TEMPORAL_TLS_CERT (not signed by a CA it trusts, expired, or not for client auth)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		if c.APIKey != "" {
			return "TLS is on (TEMPORAL_API_KEY implies it), but the server speaks plaintext: for a plaintext server such as `fastagent dev` set TEMPORAL_TLS=false, or check the port"
		}
		return "TLS is on, but the server speaks plaintext: unset TEMPORAL_TLS / TEMPORAL_TLS_CA / TEMPORAL_TLS_SERVER_NAME, or check the port"
	case useTLS && c.TLSCertFile == "" && (strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset by peer")):
		// Under TLS 1.3 a server that wants a client certificate may close
		// the connection before the client reads its alert.
		return "the server closed the TLS connection during the handshake: if it requires a client certificate (mTLS), set TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY; otherwise check --temporal-address / TEMPORAL_ADDRESS"
	case !useTLS && c.APIKey == "":
		return "start it with `fastagent dev`, or set --temporal-address / TEMPORAL_ADDRESS (a TLS endpoint also needs TEMPORAL_TLS=true, TEMPORAL_TLS_CA, TEMPORAL_API_KEY or TEMPORAL_TLS_CERT/KEY)"
	}
	return "check --temporal-address / TEMPORAL_ADDRESS, the namespace and the credentials (TEMPORAL_API_KEY or TEMPORAL_TLS_CERT/KEY)"
}

func logger(l *slog.Logger) tlog.Logger {
	if l == nil {
		l = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return tlog.NewStructuredLogger(l)
}
