package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/store"
)

// TokenFileName is the file in the state dir a generated API token is
// written to (0600), for `fastagent invoke` and `fastagent session`.
const TokenFileName = "api-token"

// ErrNoTokens is returned when the ingress would listen on a non-loopback
// address without API tokens.
var ErrNoTokens = errors.New("refusing to serve the HTTP API on a non-loopback address without API tokens: " +
	"set FASTAGENT_API_TOKEN (one admin token) or FASTAGENT_API_TOKENS / --tokens-file " +
	"(lines principal:rights:sha256hex; `fastagent token` makes one)")

// Tokens returns the API tokens Config configures (APIToken, APITokens,
// TokensFile); none is an empty set.
func (c Config) Tokens() (*ingress.Tokens, error) {
	t := &ingress.Tokens{}
	if c.APIToken != "" {
		t.AddToken(ingress.AdminPrincipal, c.APIToken, ingress.RightAdmin)
	}
	if err := t.Parse(c.APITokens); err != nil {
		return nil, fmt.Errorf("FASTAGENT_API_TOKENS: %w", err)
	}
	if c.TokensFile != "" {
		b, err := os.ReadFile(c.TokensFile)
		if err != nil {
			return nil, fmt.Errorf("tokens file: %w", err)
		}
		if err := t.Parse(string(b)); err != nil {
			return nil, fmt.Errorf("tokens file %s: %w", c.TokensFile, err)
		}
	}
	return t, nil
}

// listenHost is the host part of the address the ingress listens on.
func listenHost(cfgHost string, ln net.Listener) string {
	if ln != nil {
		if h, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
			return h
		}
	}
	return cfgHost
}

// auth returns the tokens the ingress on host accepts: the configured ones,
// or — on a loopback address only — a token generated for this run, written
// to <StateDir>/api-token (0600) and returned as generated.
func (p *Parts) auth(host string) (toks *ingress.Tokens, generated string, err error) {
	toks, err = p.Config.Tokens()
	if err != nil {
		return nil, "", err
	}
	if generated, err = p.Config.GenerateToken(host); err != nil {
		return nil, "", err
	}
	if generated != "" {
		toks.AddToken(ingress.AdminPrincipal, generated, ingress.RightAdmin)
	}
	return toks, generated, nil
}

// GenerateToken returns "" when API tokens are configured; without any,
// on a loopback host only, a new admin token for this run, written to
// <StateDir>/api-token (0600) for `fastagent invoke` and `session`.
// Elsewhere it is ErrNoTokens.
func (c Config) GenerateToken(host string) (string, error) {
	toks, err := c.Tokens()
	if err != nil {
		return "", err
	}
	if toks.Len() > 0 {
		return "", nil
	}
	if !ingress.IsLoopback(host) {
		return "", fmt.Errorf("%w (listen host %q)", ErrNoTokens, host)
	}
	generated := ingress.NewToken()
	path := filepath.Join(c.StateDir, TokenFileName)
	_ = os.Remove(path) // a file another user created keeps its mode on rewrite
	if err := os.WriteFile(path, []byte(generated+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the generated API token: %w", err)
	}
	return generated, nil
}

// hostPolicy is the Host check for an ingress on host: the loopback names,
// AllowedHosts and the listen host itself; a wildcard listen address
// (0.0.0.0, ::) or none known (a mounted handler) without AllowedHosts
// answers any Host — its callers use names this process cannot know, and
// the tokens guard it — and so does an AllowedHosts listing "*".
func (c Config) hostPolicy(host string) (allowed []string, any bool) {
	if slices.Contains(c.AllowedHosts, "*") {
		return nil, true
	}
	allowed = append(allowed, c.AllowedHosts...)
	ip := net.ParseIP(host)
	wildcard := host == "" || (ip != nil && ip.IsUnspecified())
	if !wildcard {
		allowed = append(allowed, host)
	}
	return allowed, wildcard && len(c.AllowedHosts) == 0
}

// storeOwners keeps session owners in the session store, shared by every
// ingress of a deployment. A session that exists without an owner record
// (started by a schedule or a channel, or before owners were recorded)
// belongs to nobody: only an admin reaches it.
type storeOwners struct {
	store store.Store
	agent *durable.Agent
}

// Owner implements ingress.Owners.
func (o storeOwners) Owner(ctx context.Context, session string) (string, bool, error) {
	owner, err := o.store.SessionOwner(ctx, session)
	if err == nil {
		return owner, true, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return "", false, err
	}
	if leaf, err := o.store.Leaf(ctx, session); err == nil && leaf != "" {
		return "", true, nil
	}
	_, err = o.agent.State(ctx, session)
	switch {
	case err == nil:
		return "", true, nil
	case agent.CodeOf(err) == agent.CodeNoSuchSession:
		return "", false, nil
	default:
		return "", false, err
	}
}

// NewOwners returns the store-backed ingress.Owners the serving commands
// use (a), for tests that assemble an ingress themselves.
func NewOwners(st store.Store, a *durable.Agent) ingress.Owners {
	return storeOwners{store: st, agent: a}
}

// Claim implements ingress.Owners.
func (o storeOwners) Claim(ctx context.Context, session, principal string) (string, error) {
	if principal == "" {
		return "", nil
	}
	return o.store.ClaimSession(ctx, session, principal)
}

var passwordKV = regexp.MustCompile(`(?i)(password=)('[^']*'|\S+)`)

// RedactDSN returns dsn with its password replaced by xxxxx, for help texts
// and logs: the URL form (postgres://user:pw@host/db) and the key=value form
// (password=pw).
func RedactDSN(dsn string) string {
	dsn = passwordKV.ReplaceAllString(dsn, "${1}xxxxx")
	i := strings.Index(dsn, "://")
	if i < 0 {
		return dsn
	}
	rest := dsn[i+3:]
	end := len(rest)
	if j := strings.IndexAny(rest, "/?"); j >= 0 {
		end = j
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return dsn
	}
	if user, _, ok := strings.Cut(rest[:at], ":"); ok {
		return dsn[:i+3] + user + ":xxxxx" + rest[at:]
	}
	return dsn
}
