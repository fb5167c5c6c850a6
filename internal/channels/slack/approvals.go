package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// Action IDs of the approval buttons.
const (
	actionApprove = "fastagent_approve"
	actionDeny    = "fastagent_deny"
)

// hooksPrefix is where Slack's response_url always points.
const hooksPrefix = "https://hooks.slack.com/"

// buttonValue is what an approval button carries back: the session, the
// call and the hashes the person was shown, so the decision is bound to
// them. Slack signs the whole interaction, so a person cannot alter it.
type buttonValue struct {
	Session        string `json:"s"`
	Call           string `json:"c"`
	ArgsHash       string `json:"a,omitempty"`
	DefinitionHash string `json:"d,omitempty"`
	// Admins is the workspace (team ID) whose admins and owners may decide:
	// set when the call lists AdminsRole, so only then is the clicker
	// looked up.
	Admins string `json:"ad,omitempty"`
}

// isInteraction reports whether body is an interactivity request (a form
// with a payload field) rather than an Events API callback.
func isInteraction(body []byte) bool { return bytes.HasPrefix(body, []byte("payload=")) }

// parseInteraction turns a block_actions interaction on an approval
// message into a decision, a click on a live reply's Stop button into the
// stop command (stop.go); other interactions are acknowledged and
// dropped.
func (d *Door) parseInteraction(body []byte) (channels.Parsed, error) {
	ok := channels.Parsed{Answer: channels.Answer{Status: http.StatusOK}}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return ok, fmt.Errorf("slack: interaction: %w", err)
	}
	return d.parseCallback(context.Background(), []byte(form.Get("payload")))
}

// parseCallback is parseInteraction of the interaction's JSON: the HTTP
// form's payload, or a Socket Mode interactive envelope's payload.
func (d *Door) parseCallback(ctx context.Context, payload []byte) (channels.Parsed, error) {
	ok := channels.Parsed{Answer: channels.Answer{Status: http.StatusOK}}
	var cb slack.InteractionCallback
	if err := json.Unmarshal(payload, &cb); err != nil {
		return ok, fmt.Errorf("slack: interaction: %w", err)
	}
	if cb.Type != slack.InteractionTypeBlockActions {
		return ok, nil
	}
	for _, a := range cb.ActionCallback.BlockActions {
		if a.ActionID == actionStop {
			m, err := d.stopClick(ctx, &cb, a)
			if err != nil {
				return ok, err
			}
			if m != nil {
				ok.Messages = append(ok.Messages, *m)
			}
			continue
		}
		if a.ActionID != actionApprove && a.ActionID != actionDeny {
			continue
		}
		var v buttonValue
		if err := json.Unmarshal([]byte(a.Value), &v); err != nil || v.Session == "" || v.Call == "" {
			return ok, fmt.Errorf("slack: interaction: approval button without a session and call: %q", a.Value)
		}
		if cb.User.ID == "" {
			return ok, errors.New("slack: interaction: no user")
		}
		req := workflows.ApproveRequest{Call: v.Call, Approve: a.ActionID == actionApprove, ArgsHash: v.ArgsHash,
			DefinitionHash: v.DefinitionHash, By: Kind + ":" + cb.User.ID, Door: Kind}
		if !req.Approve {
			req.Reason = "denied in Slack by <@" + cb.User.ID + ">"
		}
		if v.Admins != "" && d.isAdmin(ctx, v.Admins, cb.User.ID) {
			req.Role = AdminsRole
		}
		dec := channels.Decision{Session: v.Session, ID: Kind + ":" + cb.Team.ID + ":" + cb.User.ID + ":" + a.ActionTs, Request: req}
		if d.allowedResponseURL(cb.ResponseURL) {
			dec.Notify = func(ctx context.Context, text string) error { return respondEphemeral(ctx, cb.ResponseURL, text) }
		}
		ok.Decisions = append(ok.Decisions, dec)
	}
	return ok, nil
}

// isAdmin reports whether user is an admin or owner of workspace team; a
// door without lookups, or a failed lookup, says no (the session then
// refuses the click unless the user is listed by name).
func (d *Door) isAdmin(ctx context.Context, team, user string) bool {
	if d.Admins == nil {
		return false
	}
	admin, err := d.Admins.Is(ctx, team, user)
	if err != nil {
		slog.Warn("slack: cannot tell whether the clicker is a workspace admin; not counted as one", "user", user, "error", err)
		return false
	}
	return admin
}

// allowedResponseURL keeps the ephemeral note on Slack's own hosts (or
// the API URL a test or proxy configured): the door never posts to an
// address a request names.
func (d *Door) allowedResponseURL(u string) bool {
	if strings.HasPrefix(u, hooksPrefix) {
		return true
	}
	return d.APIURL != "" && strings.HasPrefix(u, strings.TrimRight(d.APIURL, "/")+"/")
}

// respondEphemeral shows text to the person who clicked, only to them.
func respondEphemeral(ctx context.Context, responseURL, text string) error {
	b, _ := json.Marshal(map[string]any{"response_type": "ephemeral", "replace_original": false, "text": text})
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, responseURL, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("slack: response_url answered %s", resp.Status)
	}
	return nil
}

// Ask implements channels.Asker: a message in the turn's thread showing
// the call waiting for approval (tool, full arguments, approvers,
// deadline) with Approve and Deny buttons.
func (r *Replier) Ask(ctx context.Context, t wire.Target, session string, ev agent.Event) (string, error) {
	channel, err := channelOf(t)
	if err != nil {
		return "", err
	}
	bv := buttonValue{Session: session, Call: ev.ID, ArgsHash: ev.ArgsHash, DefinitionHash: ev.DefinitionHash}
	if slices.Contains(ev.Approvers, AdminsRole) {
		bv.Admins, _, _ = strings.Cut(t.Chat, ":")
	}
	value, _ := json.Marshal(bv)
	text := askText(ev)
	blocks := []slack.Block{
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil),
		slack.NewActionBlock("fastagent_approval",
			slack.NewButtonBlockElement(actionApprove, string(value), slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false)).WithStyle(slack.StylePrimary),
			slack.NewButtonBlockElement(actionDeny, string(value), slack.NewTextBlockObject(slack.PlainTextType, "Deny", false, false)).WithStyle(slack.StyleDanger),
		),
	}
	opts := []slack.MsgOption{slack.MsgOptionText(text, false), slack.MsgOptionBlocks(blocks...)}
	if t.Thread != "" {
		opts = append(opts, slack.MsgOptionTS(t.Thread))
	}
	_, ts, err := r.api.PostMessageContext(ctx, channel, opts...)
	if err != nil {
		return "", fmt.Errorf("slack: ask approval for %s: %w", ev.ID, err)
	}
	return channel + "/" + ts, nil
}

// Settle implements channels.Asker: the approval message shows the
// decision and loses its buttons.
func (r *Replier) Settle(ctx context.Context, _ wire.Target, ref string, ev agent.Event) error {
	channel, ts, found := strings.Cut(ref, "/")
	if !found {
		return fmt.Errorf("slack: settle approval: bad reference %q", ref)
	}
	text := settledText(ev)
	_, _, _, err := r.api.UpdateMessageContext(ctx, channel, ts, slack.MsgOptionText(text, false),
		slack.MsgOptionBlocks(slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)))
	if err != nil {
		return fmt.Errorf("slack: settle approval %s: %w", ev.ID, err)
	}
	return nil
}

// channelOf is the Slack channel of a reply target ("<team>:<channel>").
func channelOf(t wire.Target) (string, error) {
	_, channel, ok := strings.Cut(t.Chat, ":")
	if !ok || channel == "" {
		return "", fmt.Errorf("slack: reply target chat %q: want <team>:<channel>", t.Chat)
	}
	return channel, nil
}

// askText describes the waiting call as the approver judges it.
func askText(ev agent.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, ":raised_hand: *%s* wants to run with:\n```%s```\n", ev.Name, truncate(channels.PrettyJSON(ev.Args), 2500))
	if len(ev.Approvers) > 0 {
		who := make([]string, 0, len(ev.Approvers))
		for _, a := range ev.Approvers {
			if a == AdminsRole {
				a = "the workspace's admins and owners"
			}
			who = append(who, a)
		}
		fmt.Fprintf(&b, "Who may decide: %s. ", strings.Join(who, ", "))
	} else {
		b.WriteString("Who may decide: the person who asked. ")
	}
	if !ev.Deadline.IsZero() {
		fmt.Fprintf(&b, "Denied <!date^%d^{date_short_pretty} {time}|at %s> if no one decides.", ev.Deadline.Unix(), ev.Deadline.UTC().Format(time.RFC1123))
	}
	return b.String()
}

// settledText is the approval message once decided.
func settledText(ev agent.Event) string {
	switch {
	case ev.TimedOut:
		return ":hourglass: Denied: " + ev.Reason + "."
	case ev.Approved:
		return ":white_check_mark: Approved" + byUser(ev.By) + "."
	default:
		return ":no_entry: Denied" + byUser(ev.By) + "."
	}
}

// byUser names a decider: a Slack user as a mention, anyone else by name.
func byUser(by string) string {
	if u, ok := strings.CutPrefix(by, Kind+":"); ok {
		return " by <@" + u + ">"
	}
	if by != "" {
		return " by " + by
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Question implements channels.Questioner: the agent's question in the
// thread, saying that a reply there answers it.
func (r *Replier) Question(ctx context.Context, t wire.Target, ev agent.Event) (string, error) {
	channel, err := channelOf(t)
	if err != nil {
		return "", err
	}
	how := "Reply in this thread, mentioning me," // in a channel only mentions reach the agent by default
	if strings.HasPrefix(channel, "D") {
		how = "Reply here" // a direct message
	}
	text := fmt.Sprintf(":question: %s\n_%s to answer (until %s)._", ev.Question, how, ev.Deadline.UTC().Format("15:04 MST, Jan 2"))
	opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
	if t.Thread != "" {
		opts = append(opts, slack.MsgOptionTS(t.Thread))
	}
	_, ts, err := r.api.PostMessageContext(ctx, channel, opts...)
	if err != nil {
		return "", fmt.Errorf("slack: ask question %s: %w", ev.ID, err)
	}
	return channel + "/" + ts, nil
}
