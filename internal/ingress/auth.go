package ingress

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
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

// AddToken accepts token (kept hashed) for principal with rights.
func (t *Tokens) AddToken(principal string, token string, rights ...Right) {
	t.entries = append(t.entries, tokenEntry{principal: Principal{Name: principal, Rights: rights}, hash: sha256.Sum256([]byte(token))})
}

// Parse adds the entries of text: one per line (or separated by ";"), each
// "principal:rights:sha256hex" where rights is a comma-separated list of
// invoke, control, approve, admin and sha256hex is the hex SHA-256 of the
// token. Blank lines and lines starting with # are skipped.
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
		if len(parts) != 3 {
			return fmt.Errorf("tokens: entry %d: want principal:rights:sha256hex", n)
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
		copy(e.hash[:], sum)
		t.entries = append(t.entries, e)
	}
	return nil
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
	rs := make([]string, len(rights))
	for i, r := range rights {
		rs[i] = string(r)
	}
	return principal + ":" + strings.Join(rs, ",") + ":" + HashToken(token)
}
