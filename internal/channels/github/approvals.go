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
