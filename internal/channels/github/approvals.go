package github

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	gh "github.com/google/go-github/v75/github"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// DefaultApproverAssociation is who may answer an approval with a comment
// when the config names no one: the repository's owners and members.
func DefaultApproverAssociation() []string { return []string{"OWNER", "MEMBER"} }

// approvalMarker marks the comments that ask for an approval.
const approvalMarker = "<!-- fastagent:approval -->"

// questionMarker marks the comments that ask the agent's question.
const questionMarker = "<!-- fastagent:question -->"

// decisionRE is a decision comment's first line: /approve or /deny, the
// call's token, and for a denial an optional reason.
var decisionRE = regexp.MustCompile(`^/(approve|deny)\s+([A-Za-z0-9_-]+)(?:\s+(.*))?$`)

// Approval tokens. A token names the waiting call a decision comment
// decides — its session, its call and the hashes of the arguments and tool
// definition the approval comment showed — and carries a MAC over those
// and the repository and issue it was posted in, under a key derived from
// the webhook secret, which only the deployment has (the ingress verifies
// webhooks with it, the worker posts the comments). A token written by
// hand, altered, or copied to another issue or repository does not verify
// and decides nothing; the session still checks the hashes, so a token of
// an earlier call that reused the call's ID decides nothing either.
const (
	tokenVersion = 1
	tokenMACSize = 16
	// maxTokenField bounds a session or call named in a token.
	maxTokenField = 512
)

// tokenKeyLabel separates the token key from every other use of the
// webhook secret.
const tokenKeyLabel = "fastagent github approval token v1"

// errNoTokenKey is Ask's error without a webhook secret to bind tokens.
var errNoTokenKey = errors.New("github: approval comments need the webhook secret (" + DefaultSecretEnv + " or the file's secretEnv) to bind their tokens")

// approvalKey derives the token key from the webhook secret.
func approvalKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(tokenKeyLabel))
	return m.Sum(nil)
}

// grant is what a token lets a decision comment decide.
type grant struct {
	Session, Call, ArgsHash, DefinitionHash string
}

// issueToken is the token of g, asked in repo's issue or pull request
// thread, under key.
func issueToken(key []byte, repo, thread string, g grant) string {
	payload := []byte{tokenVersion}
	payload = appendField(payload, g.Session)
	payload = appendField(payload, g.Call)
	payload = appendHash(payload, g.ArgsHash)
	payload = appendHash(payload, g.DefinitionHash)
	return base64.RawURLEncoding.EncodeToString(append(payload, tokenMAC(key, repo, thread, payload)...))
}

// errTokenRefused is wrapped by every refusal of a token.
var errTokenRefused = errors.New("approval token refused")

// openToken verifies tok, written in repo's issue or pull request thread,
// and returns what it grants.
func openToken(key []byte, repo, thread, tok string) (grant, error) {
	notIssued := fmt.Errorf("%w: it was not issued for a call waiting in %s#%s (altered, written by hand, or copied from another issue or repository); "+
		"nothing was decided — use the token of the approval comment in this thread", errTokenRefused, repo, thread)
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(key) == 0 || len(b) < 1+tokenMACSize || b[0] != tokenVersion {
		return grant{}, notIssued
	}
	payload, mac := b[:len(b)-tokenMACSize], b[len(b)-tokenMACSize:]
	if !hmac.Equal(mac, tokenMAC(key, repo, thread, payload)) {
		return grant{}, notIssued
	}
	var g grant
	rest := payload[1:]
	var ok1, ok2, ok3, ok4 bool
	g.Session, rest, ok1 = readField(rest)
	g.Call, rest, ok2 = readField(rest)
	g.ArgsHash, rest, ok3 = readHash(rest)
	g.DefinitionHash, rest, ok4 = readHash(rest)
	if !ok1 || !ok2 || !ok3 || !ok4 || len(rest) != 0 || g.Session == "" || g.Call == "" {
		return grant{}, notIssued
	}
	return g, nil
}

// tokenMAC is the MAC of a token's payload in repo's thread.
func tokenMAC(key []byte, repo, thread string, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	var b []byte
	b = appendField(b, repo)
	b = appendField(b, thread)
	m.Write(b)
	m.Write(payload)
	return m.Sum(nil)[:tokenMACSize]
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func readField(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxTokenField || uint64(len(b)-k) < n {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

// Hashes are "sha256:<64 hex>"; a token carries such a hash as its 32
// bytes (tag 1), anything else as a field (tag 0), to keep tokens short.
const (
	hashAsField  = 0
	hashAsSHA256 = 1
	sha256Prefix = "sha256:"
)

func appendHash(b []byte, h string) []byte {
	if hexSum, ok := strings.CutPrefix(h, sha256Prefix); ok && hexSum == strings.ToLower(hexSum) {
		if raw, err := hex.DecodeString(hexSum); err == nil && len(raw) == sha256.Size {
			return append(append(b, hashAsSHA256), raw...)
		}
	}
	return appendField(append(b, hashAsField), h)
}

func readHash(b []byte) (string, []byte, bool) {
	if len(b) == 0 {
		return "", nil, false
	}
	switch b[0] {
	case hashAsSHA256:
		if len(b) < 1+sha256.Size {
			return "", nil, false
		}
		return sha256Prefix + hex.EncodeToString(b[1:1+sha256.Size]), b[1+sha256.Size:], true
	case hashAsField:
		return readField(b[1:])
	}
	return "", nil, false
}

// decision reads a new comment "/approve <token>" or "/deny <token>
// [reason]" as a decision on the call the token names, when its author's
// association may decide; isDecision is false for any other comment (it
// may be a turn). A decision comment never becomes a turn, decided or not.
func (d *Door) decision(ev *Event, id string) (dec *channels.Decision, isDecision bool) {
	dec, isDecision, _ = d.decide(ev, id)
	return dec, isDecision
}

// decide is decision with the reason a decision comment decides nothing.
func (d *Door) decide(ev *Event, id string) (dec *channels.Decision, isDecision bool, refused error) {
	if ev.Name != "issue_comment" || ev.Action != "created" {
		return nil, false, nil
	}
	first, _, _ := strings.Cut(strings.TrimSpace(ev.Comment), "\n")
	m := decisionRE.FindStringSubmatch(strings.TrimSpace(first))
	if m == nil {
		return nil, false, nil
	}
	allowed := d.ApproverAssociation
	if len(allowed) == 0 {
		allowed = DefaultApproverAssociation()
	}
	if !slices.Contains(allowed, strings.ToUpper(ev.Association)) {
		return nil, true, fmt.Errorf("@%s (%s) may not decide approvals here: approverAssociation is %s; nothing was decided",
			ev.Sender, ev.Association, strings.Join(allowed, ", "))
	}
	g, err := openToken(approvalKey(d.Secret), ev.Repo, strconv.Itoa(ev.Number), m[2])
	if err != nil {
		return nil, true, err
	}
	req := workflows.ApproveRequest{Call: g.Call, Approve: m[1] == "approve", ArgsHash: g.ArgsHash, DefinitionHash: g.DefinitionHash,
		By: Kind + ":" + ev.Sender, Door: Kind, Vetted: true}
	if !req.Approve {
		req.Reason = strings.TrimSpace(m[3])
		if req.Reason == "" {
			req.Reason = "denied on GitHub by @" + ev.Sender
		}
	}
	return &channels.Decision{Session: g.Session, ID: Kind + ":" + id, Request: req}, true, nil
}

// Ask implements channels.Asker: a comment showing the waiting call and
// the decision comments that answer it.
func (r *Replier) Ask(ctx context.Context, t wire.Target, session string, ev agent.Event) (string, error) {
	rd, err := r.target(ctx, t)
	if err != nil {
		return "", err
	}
	if len(r.approvalKey) == 0 {
		return "", channels.Permanent(errNoTokenKey)
	}
	tok := issueToken(r.approvalKey, t.Chat, t.Thread, grant{Session: session, Call: ev.ID, ArgsHash: ev.ArgsHash, DefinitionHash: ev.DefinitionHash})
	var b strings.Builder
	fmt.Fprintf(&b, "⏸️ **%s** wants to run with:\n\n```json\n%s\n```\n\n", ev.Name, channels.PrettyJSON(ev.Args))
	fmt.Fprintf(&b, "Reply `/approve %s` or `/deny %s <reason>`", tok, tok)
	if len(ev.Approvers) > 0 {
		fmt.Fprintf(&b, " (%s may decide)", strings.Join(ev.Approvers, ", "))
	}
	if !ev.Deadline.IsZero() {
		fmt.Fprintf(&b, ". Denied at %s if no one decides", ev.Deadline.UTC().Format(time.RFC1123))
	}
	b.WriteString(".\n\n" + approvalMarker)
	c, _, err := rd.api.Issues.CreateComment(ctx, rd.owner, rd.repo, rd.number, &gh.IssueComment{Body: gh.Ptr(b.String())})
	if err != nil {
		return "", classify(err)
	}
	return refComment + ":" + strconv.FormatInt(c.GetID(), 10), nil
}

// Settle implements channels.Asker: the approval comment shows the
// decision.
func (r *Replier) Settle(ctx context.Context, t wire.Target, ref string, ev agent.Event) error {
	rd, err := r.target(ctx, t)
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(ref, refComment+":"), 10, 64)
	if err != nil {
		return channels.Permanent(fmt.Errorf("github: bad approval reference %q", ref))
	}
	var text string
	switch {
	case ev.TimedOut:
		text = "⌛ Denied: " + ev.Reason + "."
	case ev.Approved:
		text = "✅ Approved" + byLogin(ev.By) + "."
	default:
		text = "⛔ Denied" + byLogin(ev.By) + "."
	}
	_, _, err = rd.api.Issues.EditComment(ctx, rd.owner, rd.repo, id, &gh.IssueComment{Body: gh.Ptr(text + "\n\n" + approvalMarker)})
	return classify(err)
}

// Question implements channels.Questioner: the agent's question as a
// comment on the issue or pull request, saying how to answer and until
// when. The asker's next comment there that reaches the agent (as any
// comment does under the channel's rules) is the answer.
func (r *Replier) Question(ctx context.Context, t wire.Target, ev agent.Event) (string, error) {
	rd, err := r.target(ctx, t)
	if err != nil {
		return "", err
	}
	body := questionBody(ev.Question, r.Answering, ev.Deadline)
	c, _, err := rd.api.Issues.CreateComment(ctx, rd.owner, rd.repo, rd.number, &gh.IssueComment{Body: gh.Ptr(body)})
	if err != nil {
		return "", fmt.Errorf("github: ask question %s: %w", ev.ID, classify(err))
	}
	return refComment + ":" + strconv.FormatInt(c.GetID(), 10), nil
}

// maxQuestion bounds the question shown, well within a comment.
const maxQuestion = 60000

// questionBody is the question comment: the question (Markdown, as the
// agent's replies are, but unable to carry a hidden HTML comment such as
// a reply marker), then how to answer (how, when known) and until when,
// and its marker: the comment is never a turn.
func questionBody(q, how string, deadline time.Time) string {
	q = strings.ReplaceAll(strings.TrimSpace(q), "<!--", "&lt;!--")
	if utf16Len(q) > maxQuestion {
		q = Split(q, maxQuestion)[0] + "…"
	}
	var b strings.Builder
	b.WriteString("❓ " + q)
	switch {
	case how != "" && !deadline.IsZero():
		b.WriteString("\n\n_" + how + " (until " + deadline.UTC().Format("15:04 MST, Jan 2") + ")._")
	case how != "":
		b.WriteString("\n\n_" + how + "._")
	case !deadline.IsZero():
		b.WriteString("\n\n_Waiting for an answer until " + deadline.UTC().Format("15:04 MST, Jan 2") + "._")
	}
	b.WriteString("\n\n" + questionMarker)
	return b.String()
}

// anyComment is how to answer when any new comment reaches the agent.
const anyComment = "Reply with a comment here to answer"

// answering is how a comment reaches the agent, for the question comment:
// any new comment (an executable policy decides for itself, or a rule
// asks for no mention), a comment mentioning the login every
// issue_comment rule requires, or "" when no rule takes new comments.
func answering(c Config) string {
	if c.Policy != nil {
		return anyComment
	}
	mention := ""
	for _, r := range c.Rules {
		if r.Event != "issue_comment" {
			continue
		}
		acts := r.Actions
		if r.Action != "" {
			acts = append([]string{r.Action}, acts...)
		}
		if len(acts) > 0 && !slices.Contains(acts, "created") {
			continue
		}
		if r.Mentions == "" {
			return anyComment
		}
		if mention == "" {
			mention = r.Mentions
		}
	}
	if mention == "" {
		return ""
	}
	return "Reply with a comment mentioning `@" + strings.TrimPrefix(mention, "@") + "` to answer"
}

// target is the issue or pull request of a reply target, with a client.
func (r *Replier) target(ctx context.Context, t wire.Target) (*render, error) {
	rd, err := r.Render(ctx, wire.Target{Chat: t.Chat, Thread: t.Thread, Message: orKey(t.Message), Data: t.Data}, "")
	if err != nil {
		return nil, err
	}
	return rd.(*render), nil
}

func orKey(s string) string {
	if s == "" {
		return "approval"
	}
	return s
}

func byLogin(by string) string {
	if u, ok := strings.CutPrefix(by, Kind+":"); ok {
		return " by @" + u
	}
	if by != "" {
		return " by " + by
	}
	return ""
}
