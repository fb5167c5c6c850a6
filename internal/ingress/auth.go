package ingress

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Right is a permission a token grants.
type Right string

// The rights a token can carry.
const (
	// RightInvoke runs turns (POST /invoke) in the principal's own sessions.
	RightInvoke Right = "invoke"
	// RightControl aborts, steers, reads the state of and re-attaches to the
	// principal's own sessions.
	RightControl Right = "control"
	// RightApprove answers approval requests (and reads the state, to see
	// what is being approved) in the principal's own sessions.
	RightApprove Right = "approve"
	// RightCodec encodes and decodes Temporal payloads through the codec
	// server (POST /codec/…): whoever holds it can read every session's
	// history, so it is granted apart from the session rights.
	RightCodec Right = "codec"
	// RightMetrics scrapes GET /metrics.
	RightMetrics Right = "metrics"
	// RightAdmin is every right, on every session.
	RightAdmin Right = "admin"
)

var knownRights = []Right{RightInvoke, RightControl, RightApprove, RightCodec, RightMetrics, RightAdmin}

// Principal is who a request acts for.
type Principal struct {
	Name   string
	Rights []Right
	// Agents, when set, are the only agents (by name) the principal may
	// reach; any other agent's routes answer 404 as if it did not exist.
	// Empty: every agent the deployment serves.
	Agents []string
}

// Reaches reports whether p may use agent name.
func (p Principal) Reaches(name string) bool {
	return len(p.Agents) == 0 || slices.Contains(p.Agents, name)
}

// Has reports whether p holds right r (admin holds every right).
func (p Principal) Has(r Right) bool {
	return slices.Contains(p.Rights, RightAdmin) || slices.Contains(p.Rights, r)
}

// Admin reports whether p may act on every session.
func (p Principal) Admin() bool { return slices.Contains(p.Rights, RightAdmin) }

// AdminPrincipal is the principal FASTAGENT_API_TOKEN names.
const AdminPrincipal = "admin"

type tokenEntry struct {
	principal Principal
	hash      [sha256.Size]byte
}

// Tokens are the API tokens a server accepts, kept as SHA-256 hashes only.
// The zero value (and nil) accepts nothing.
type Tokens struct {
	entries []tokenEntry
}

// Len is the number of tokens configured.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// AddToken accepts token (kept hashed) for principal with rights, on
// every agent.
func (t *Tokens) AddToken(principal string, token string, rights ...Right) {
	t.AddTokenFor(principal, token, nil, rights...)
}

// AddTokenFor accepts token for principal with rights on agents only
// (nil: every agent).
func (t *Tokens) AddTokenFor(principal, token string, agents []string, rights ...Right) {
	t.entries = append(t.entries, tokenEntry{principal: Principal{Name: principal, Rights: rights, Agents: agents},
		hash: sha256.Sum256([]byte(token))})
}

// Parse adds the entries of text: one per line (or separated by ";"), each
// "principal:rights:sha256hex[:agents]" where rights is a comma-separated
// list of invoke, control, approve, codec, metrics, admin, sha256hex is the
// hex SHA-256 of the token, and agents (optional) a comma-separated list of
// the agents the token may reach (none: all). Blank lines and lines
// starting with # are skipped.
func (t *Tokens) Parse(text string) error {
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(text, ";", "\n")))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, ":")
		if len(parts) != 3 && len(parts) != 4 {
			return fmt.Errorf("tokens: entry %d: want principal:rights:sha256hex or principal:rights:sha256hex:agents", n)
		}
		name := strings.TrimSpace(parts[0])
		if name == "" {
			return fmt.Errorf("tokens: entry %d: empty principal", n)
		}
		var rights []Right
		for _, r := range strings.Split(parts[1], ",") {
			r := Right(strings.TrimSpace(r))
			if !slices.Contains(knownRights, r) {
				return fmt.Errorf("tokens: entry %d (%s): unknown right %q (want invoke, control, approve or admin)", n, name, r)
			}
			rights = append(rights, r)
		}
		sum, err := hex.DecodeString(strings.TrimSpace(parts[2]))
		if err != nil || len(sum) != sha256.Size {
			// Never echo the value: it may be a raw token pasted by mistake.
			return fmt.Errorf("tokens: entry %d (%s): the third field must be the 64-hex-digit SHA-256 of the token, not the token itself", n, name)
		}
		e := tokenEntry{principal: Principal{Name: name, Rights: rights}}
		if len(parts) == 4 {
			if e.principal.Agents, err = parseAgents(parts[3]); err != nil {
				return fmt.Errorf("tokens: entry %d (%s): %w", n, name, err)
			}
		}
		copy(e.hash[:], sum)
		t.entries = append(t.entries, e)
	}
	return nil
}

// parseAgents reads the agents field of a tokens line.
func parseAgents(field string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(field, ",") {
		a = strings.TrimSpace(a)
		if a == "" || strings.ContainsAny(a, "/ ") {
			return nil, fmt.Errorf("the fourth field lists the agents the token reaches, comma-separated names; %q is not a name", a)
		}
		out = append(out, a)
	}
	return out, nil
}

// Lookup returns the principal token belongs to. It hashes token and compares
// the hash with every entry in constant time, so timing tells nothing about
// how much of a guess was right.
func (t *Tokens) Lookup(token string) (Principal, bool) {
	if t == nil || token == "" {
		return Principal{}, false
	}
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(sum[:], t.entries[i].hash[:]) == 1 && found < 0 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	return t.entries[found].principal, true
}

// Authenticator says who a request acts for: the API tokens (Tokens) by
// default, or an embedder's own resolver in front (Server.Principals). A
// non-nil error refuses the request with 401 unauthorized, the error's
// message as the body's "error"; an error with a Challenge() string method
// names the WWW-Authenticate challenge (else Bearer realm="fastagent").
type Authenticator interface {
	Authenticate(r *http.Request) (Principal, error)
}

// Refusal is a refused authentication with the challenge to send back.
type Refusal struct {
	Message, Scheme string
}

func (e *Refusal) Error() string { return e.Message }

// Challenge is the WWW-Authenticate value.
func (e *Refusal) Challenge() string { return e.Scheme }

// bearerRealm is the challenge of a request without a usable token.
const bearerRealm = `Bearer realm="fastagent"` //nolint:gosec // G101: a challenge naming the scheme, no credential

// Authenticate implements Authenticator: the bearer token of the
// Authorization header, looked up in t (nil: none accepted).
func (t *Tokens) Authenticate(r *http.Request) (Principal, error) {
	h := r.Header.Get("Authorization")
	scheme, token, _ := strings.Cut(h, " ")
	if h == "" || !strings.EqualFold(scheme, "Bearer") {
		return Principal{}, &Refusal{Message: "send an API token: Authorization: Bearer <token>", Scheme: bearerRealm}
	}
	p, ok := t.Lookup(strings.TrimSpace(token))
	if !ok {
		return Principal{}, &Refusal{Message: "the API token is not valid", Scheme: bearerRealm + `, error="invalid_token"`}
	}
	return p, nil
}

// HashToken returns the hex SHA-256 of token, as a tokens line holds it.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// NewToken returns a new random API token (256 bits).
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "fa_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// TokenLine is the tokens-file line for token.
func TokenLine(principal string, token string, rights ...Right) string {
	return TokenLineFor(principal, token, nil, rights...)
}

// TokenLineFor is the tokens-file line for a token that reaches only
// agents (nil: every agent).
func TokenLineFor(principal, token string, agents []string, rights ...Right) string {
	rs := make([]string, len(rights))
	for i, r := range rights {
		rs[i] = string(r)
	}
	line := principal + ":" + strings.Join(rs, ",") + ":" + HashToken(token)
	if len(agents) > 0 {
		line += ":" + strings.Join(agents, ",")
	}
	return line
}
