package github

import (
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	gh "github.com/google/go-github/v75/github"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
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

// approvalToken names a waiting call in a decision comment: the
// repository, the session and the call, so a comment decides only a call
// of the repository it is written in.
func approvalToken(repo, session, call string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(repo + "\n" + session + "\n" + call))
}

func parseToken(tok string) (repo, session, call string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", "", "", false
	}
	parts := strings.Split(string(b), "\n")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// decision reads a new comment "/approve <token>" or "/deny <token>
// [reason]" as a decision on the call the token names, when its author's
// association may decide; ok is false for any other comment (it may be a
// turn). A decision comment never becomes a turn, decided or not.
func (d *Door) decision(ev *Event, id string) (dec *channels.Decision, isDecision bool) {
	if ev.Name != "issue_comment" || ev.Action != "created" {
		return nil, false
	}
	first, _, _ := strings.Cut(strings.TrimSpace(ev.Comment), "\n")
	m := decisionRE.FindStringSubmatch(strings.TrimSpace(first))
	if m == nil {
		return nil, false
	}
	repo, session, call, ok := parseToken(m[2])
	allowed := d.ApproverAssociation
	if len(allowed) == 0 {
		allowed = DefaultApproverAssociation()
	}
	if !ok || repo != ev.Repo || !slices.Contains(allowed, strings.ToUpper(ev.Association)) {
		return nil, true
	}
	req := workflows.ApproveRequest{Call: call, Approve: m[1] == "approve", By: Kind + ":" + ev.Sender, Door: Kind, Vetted: true}
	if !req.Approve {
		req.Reason = strings.TrimSpace(m[3])
		if req.Reason == "" {
			req.Reason = "denied on GitHub by @" + ev.Sender
		}
	}
	return &channels.Decision{Session: session, ID: Kind + ":" + id, Request: req}, true
}

// Ask implements channels.Asker: a comment showing the waiting call and
// the decision comments that answer it.
func (r *Replier) Ask(ctx context.Context, t workflows.Target, session string, ev agent.Event) (string, error) {
	rd, err := r.target(ctx, t)
	if err != nil {
		return "", err
	}
	tok := approvalToken(t.Chat, session, ev.ID)
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
func (r *Replier) Settle(ctx context.Context, t workflows.Target, ref string, ev agent.Event) error {
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
func (r *Replier) Question(ctx context.Context, t workflows.Target, ev agent.Event) (string, error) {
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
func (r *Replier) target(ctx context.Context, t workflows.Target) (*render, error) {
	rd, err := r.Render(ctx, workflows.Target{Chat: t.Chat, Thread: t.Thread, Message: orKey(t.Message), Data: t.Data}, "")
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
