package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// pki is a throwaway CA with certificates it signed, written as PEM files.
type pki struct {
	dir  string
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	// CAFile is the CA's certificate.
	CAFile string
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir(), key: key, cert: cert}
	p.CAFile = p.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	f := filepath.Join(p.dir, name)
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// issue signs a certificate for dnsNames (server and client auth) and
// returns its certificate and key files.
func (p *pki) issue(t *testing.T, name string, dnsNames ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     dnsNames,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+".key", "EC PRIVATE KEY", kder)
}

// A fastagent worker and agent reach a TLS frontend that requires client
// certificates (a private CA, a server name that is not the address),
// configured only by the TEMPORAL_TLS_* variables, and serve a turn. A wrong
// CA, a missing client certificate or a missing server name override fail
// to connect with an error that says which.
func TestTLSFrontendWithClientCertificates(t *testing.T) {
	ca := newPKI(t, "fastagent-test")
	const serverName = "temporal.fastagent.test"
	srvCert, srvKey := ca.issue(t, "frontend", serverName)
	cliCert, cliKey := ca.issue(t, "worker")
	other := newPKI(t, "someone-else")

	srv, err := devserver.Start(context.Background(), devserver.Options{
		DatabaseFile: filepath.Join(t.TempDir(), "temporal.db"),
		UIPort:       -1,
		LogWriter:    logSink(t.TempDir()),
		TLS: &devserver.TLS{CertFile: srvCert, KeyFile: srvKey, CAFile: ca.CAFile, ServerName: serverName,
			ClientCAFile: ca.CAFile},
	})
	if err != nil {
		t.Fatalf("start TLS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))

	dial := func(env map[string]string) error {
		for _, k := range []string{"TEMPORAL_TLS_CERT", "TEMPORAL_TLS_KEY", "TEMPORAL_TLS_CA", "TEMPORAL_TLS_SERVER_NAME", "TEMPORAL_TLS", "TEMPORAL_API_KEY"} {
			t.Setenv(k, env[k])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := tclient.Dial(ctx, tclient.Config{Address: srv.FrontendAddress(), Logger: quiet}.FromEnv())
		if err == nil {
			c.Close()
		}
		return err
	}
	// The client certificate gets through TLS; the key gets the calls
	// served (a certificate alone is no credential).
	good := map[string]string{"TEMPORAL_TLS_CERT": cliCert, "TEMPORAL_TLS_KEY": cliKey,
		"TEMPORAL_TLS_CA": ca.CAFile, "TEMPORAL_TLS_SERVER_NAME": serverName, "TEMPORAL_API_KEY": srv.APIKey()}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // in the error
	}{
		{"wrong CA", with("TEMPORAL_TLS_CA", other.CAFile), []string{"TEMPORAL_TLS_CA", "unknown authority"}},
		{"no client certificate", map[string]string{"TEMPORAL_TLS_CA": ca.CAFile, "TEMPORAL_TLS_SERVER_NAME": serverName},
			[]string{"client certificate", "TEMPORAL_TLS_CERT"}},
		{"no server name override", with("TEMPORAL_TLS_SERVER_NAME", ""), []string{"TEMPORAL_TLS_SERVER_NAME", "IP SANs"}},
		{"no TLS at all", map[string]string{}, []string{"cannot reach"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := dial(tc.env)
			if err == nil {
				t.Fatal("connected, want a refusal")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}

	// The good configuration serves a turn through a worker and the
	// durable agent, both on TLS clients.
	if err := dial(good); err != nil {
		t.Fatalf("dial with client certificate, private CA and server name: %v", err)
	}
	c, err := tclient.Dial(context.Background(), tclient.Config{Address: srv.FrontendAddress(), Logger: quiet}.FromEnv())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	k := testkit.New(t)
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	queue := fmt.Sprintf("e2e-tls-%d", time.Now().UnixNano())
	rt, err := k.Runtime(context.Background(), bus, serve.Config{TaskQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	w, err := rt.StartWorker(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	a := rt.Agent(c)
	evs := collect(t, a, context.Background(), "tls", "hello over mTLS")
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
		t.Fatalf("turn over TLS: %s", describe(evs))
	}
	if got := agenttest.TextAfterLastRetry(evs); !strings.Contains(got, "hello over mTLS") {
		t.Errorf("answer %q", got)
	}
}
