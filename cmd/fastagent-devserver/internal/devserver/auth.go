package devserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"time"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"
)

// How the embedded server is locked (every listener is on loopback, where
// a tool process of the agent may reach it):
//
//   - The frontend (the port clients dial) maps the caller's bearer token to
//     claims: the per-run key is a system admin, anything else has no role,
//     and Temporal's default authorizer then refuses every call but the
//     health checks (grpc.health.v1 and GetSystemInfo).
//   - The server's own clients (its system worker: schedules, batch
//     operations, namespace workers; its history service's calls back to
//     the frontend) cannot send a token. They call an "internal-frontend"
//     instead, which Temporal gives admin claims to every caller, as it is
//     meant to sit behind internode mTLS.
//   - Internode traffic (history, matching, the internal frontend) is
//     therefore mutual TLS with a CA drawn for this run and kept in memory:
//     without its certificate nothing talks to those ports.

// internodeName is the name the internode certificate holds and the
// server's clients check.
const internodeName = "internode.fastagent.invalid"

// tokenClaims is the frontend's ClaimMapper: the bearer token equal to key
// (compared in constant time) is a system admin; no token or another one
// gets empty claims (no role).
type tokenClaims struct{ key []byte }

// GetClaims implements authorization.ClaimMapper.
func (m tokenClaims) GetClaims(info *authorization.AuthInfo) (*authorization.Claims, error) {
	tok, ok := bearer(info.AuthToken)
	if !ok || subtle.ConstantTimeCompare([]byte(tok), m.key) != 1 {
		return &authorization.Claims{}, nil
	}
	return &authorization.Claims{Subject: "fastagent", AuthType: "bearer", System: authorization.RoleAdmin}, nil
}

// bearer returns the token of an "authorization: Bearer <token>" value.
func bearer(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// newKey draws a per-run credential: 32 random bytes, hex.
func newKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("devserver: draw the frontend credential: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeKey writes the credential to file, readable by its owner only.
func writeKey(file, key string) error {
	_ = os.Remove(file) // a file another user created keeps its mode on rewrite
	if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
		return fmt.Errorf("devserver: write the frontend credential: %w", err)
	}
	return nil
}

// internodeTLS returns the internode mutual-TLS settings: a CA drawn for
// this run signs one certificate (server and client auth) that every
// service presents and requires. Nothing of it is written to disk.
func internodeTLS() (config.GroupTLS, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return config.GroupTLS{}, fmt.Errorf("devserver: internode CA key: %w", err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "fastagent dev internode CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return config.GroupTLS{}, fmt.Errorf("devserver: internode CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return config.GroupTLS{}, fmt.Errorf("devserver: internode CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return config.GroupTLS{}, fmt.Errorf("devserver: internode key: %w", err)
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: internodeName},
		DNSNames:     []string{internodeName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return config.GroupTLS{}, fmt.Errorf("devserver: internode certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return config.GroupTLS{}, fmt.Errorf("devserver: internode key: %w", err)
	}
	caData := pemData("CERTIFICATE", caDER)
	return config.GroupTLS{
		Server: config.ServerTLS{
			CertData:          pemData("CERTIFICATE", leafDER),
			KeyData:           pemData("EC PRIVATE KEY", keyDER),
			ClientCAData:      []string{caData},
			RequireClientAuth: true,
		},
		Client: config.ClientTLS{ServerName: internodeName, RootCAData: []string{caData}},
	}, nil
}

// pemData is a PEM block, base64-encoded as the server's *Data TLS fields
// expect.
func pemData(kind string, der []byte) string {
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}))
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
