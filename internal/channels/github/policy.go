package github

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
	"unicode"

	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/tools"
)

// Rule is one declarative policy rule of channels/github.yaml: when an
// event of Event (with one of Actions) meets every condition, it gives one
// intent — a turn with Prompt in session Session.
type Rule struct {
	// Event is the X-GitHub-Event: issues, issue_comment, pull_request,
	// pull_request_review or pull_request_review_comment.
	Event string `yaml:"event"`
	// Action and Actions list the accepted actions (none: any; with Label,
	// "labeled").
	Action  string   `yaml:"action"`
	Actions []string `yaml:"actions"`
	// Mentions ("@my-bot") requires the comment (or, with none, the body)
	// to mention that login.
	Mentions string `yaml:"mentions"`
	// Label requires the label added (or removed) to be this one.
	Label string `yaml:"label"`
	// AuthorAssociation lists the author associations accepted (OWNER,
	// MEMBER, COLLABORATOR, CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR,
	// FIRST_TIMER, MANNEQUIN, NONE; any case). None given: the default,
	// DefaultAuthorAssociation(). [any] accepts everyone.
	AuthorAssociation []string `yaml:"authorAssociation"`
	// Session is the session ID template (default DefaultSession).
	Session string `yaml:"session"`
	// Prompt is the prompt template (default DefaultPrompt).
	Prompt string `yaml:"prompt"`
	// Review posts the answer as a pull request review (on pull requests;
	// elsewhere a comment).
	Review bool `yaml:"review"`
}

// ExecPolicy is an executable policy: it gets the event as JSON on stdin
// ({"event","action","delivery","view","payload"}) and prints the intents
// as a JSON array of {"session","prompt","review"} on stdout.
type ExecPolicy struct {
	// Exec is the executable, relative to the channel file's folder.
	Exec string   `yaml:"exec"`
	Args []string `yaml:"args"`
	// Timeout bounds one run (default 2s, at most 5s): it runs in the
	// webhook request, before the ACK.
	Timeout string `yaml:"timeout"`

	timeout time.Duration
}

// Defaults of a rule's templates.
const (
	DefaultSession = "github:{{.repo}}#{{.number}}"
	DefaultPrompt  = "{{.sender}} on {{.repo}}#{{.number}} ({{.title}}), {{.url}}:\n\n{{if .comment}}{{.comment}}{{else}}{{.body}}{{end}}"
)

// DefaultAuthorAssociation is what a rule without authorAssociation
// accepts: the repository's owner, the organisation's members and the
// collaborators. On a public repository anybody can comment or open an
// issue; without it, anybody could start the agent.
func DefaultAuthorAssociation() []string { return []string{"OWNER", "MEMBER", "COLLABORATOR"} }

// AnyAuthor is the authorAssociation that, alone, accepts every author.
const AnyAuthor = "ANY"

// authorAssociations are GitHub's values of author_association.
var authorAssociations = []string{"COLLABORATOR", "CONTRIBUTOR", "FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR", "MANNEQUIN", "MEMBER", "NONE", "OWNER"}

// DefaultExecTimeout bounds an executable policy without a timeout.
const DefaultExecTimeout = 2 * time.Second

// Intent is one turn a policy asks for.
type Intent struct {
	Session string `json:"session"`
	Prompt  string `json:"prompt"`
	// Review posts the answer as a pull request review.
	Review bool `json:"review,omitempty"`
}

// Policy maps verified events to intents: compiled rules or an executable.
type Policy struct {
	rules []compiledRule
	exec  *ExecPolicy
	bot   string
	// box and protected confine the executable (Door.Confine); without a
	// box it does not run.
	box       *sandbox.Sandbox
	protected []tools.Protected
}

// answerText is a comment as the answer to a question the agent asked:
// its text without the mention of the bot that addressed it ("" for an
// event without a comment).
func (p *Policy) answerText(comment string) string {
	if p.bot != "" {
		comment = strings.ReplaceAll(comment, "@"+p.bot, "")
	}
	return strings.TrimSpace(comment)
}

type compiledRule struct {
	Rule
	actions []string
	mention *regexp.Regexp
	session *template.Template
	prompt  *template.Template
}

// maxSession bounds a session ID a policy makes.
const maxSession = 200

// compile checks the file's policy: known events and actions, parseable
// templates that use only view fields, one of rules or policy.
func (c Config) compile() (*Policy, error) {
	p := &Policy{bot: c.Bot}
	switch {
	case len(c.Rules) > 0 && c.Policy != nil:
		return nil, errors.New("rules and policy exclude each other: use one")
	case len(c.Rules) == 0 && c.Policy == nil:
		return nil, errors.New("no rules and no policy: no event would ever start a turn (see fastagent add github)")
	}
	if c.Policy != nil {
		e := *c.Policy
		if e.Exec == "" {
			return nil, errors.New("policy.exec: missing")
		}
		e.timeout = DefaultExecTimeout
		if e.Timeout != "" {
			d, err := time.ParseDuration(e.Timeout)
			if err != nil || d <= 0 || d > execTimeoutMax {
				return nil, fmt.Errorf("policy.timeout: %q is not a duration in (0, %s]", e.Timeout, execTimeoutMax)
			}
			e.timeout = d
		}
		p.exec = &e
		return p, nil
	}
	sample := (&Event{Name: "issue_comment", Action: "created", Repo: "o/r", Number: 1, Labels: []string{"bug"}}).View()
	for i, r := range c.Rules {
		cr, err := compileRule(r, sample)
		if err != nil {
			return nil, fmt.Errorf("rules[%d]: %w", i, err)
		}
		p.rules = append(p.rules, cr)
	}
	return p, nil
}

func compileRule(r Rule, sample map[string]any) (compiledRule, error) {
	cr := compiledRule{Rule: r}
	known, ok := knownActions[r.Event]
	if !ok {
		return cr, fmt.Errorf("event: %q is not one of %s", r.Event, strings.Join(sortedKeys(knownActions), ", "))
	}
	if r.Label != "" && r.Event != "issues" && r.Event != "pull_request" {
		return cr, fmt.Errorf("label: only issues and pull_request events carry a label, not %s", r.Event)
	}
	cr.actions = append([]string(nil), r.Actions...)
	if r.Action != "" {
		cr.actions = append(cr.actions, r.Action)
	}
	if len(cr.actions) == 0 && r.Label != "" {
		cr.actions = []string{"labeled"}
	}
	for _, a := range cr.actions {
		if !slices.Contains(known, a) {
			return cr, fmt.Errorf("action: %q is not an action of %s (%s)", a, r.Event, strings.Join(known, ", "))
		}
	}
	if r.Mentions != "" {
		login := strings.TrimPrefix(r.Mentions, "@")
		if login == "" || strings.ContainsFunc(login, unicode.IsSpace) {
			return cr, fmt.Errorf("mentions: %q is not @<login>", r.Mentions)
		}
		cr.mention = regexp.MustCompile(`(?i)(^|[^\w/@-])@` + regexp.QuoteMeta(login) + `($|[^\w-])`)
	}
	var err error
	if cr.AuthorAssociation, err = compileAssociations(r.AuthorAssociation); err != nil {
		return cr, err
	}
	if cr.session, err = parseTemplate("session", r.Session, DefaultSession, sample); err != nil {
		return cr, err
	}
	if usesWrittenText(cr.session, sample) {
		return cr, fmt.Errorf("session: %q depends on text people write (title, body, comment, labels): whoever opens an issue or comments "+
			"would choose the session, another conversation's or agent's included; build it from repo, number, owner, name, sender, event, action, pr", r.Session)
	}
	var out bytes.Buffer
	if err := cr.session.Execute(&out, sample); err == nil {
		if err := checkSessionScope(strings.TrimSpace(out.String())); err != nil {
			return cr, fmt.Errorf("session: %q, for o/r#1: %w", r.Session, err)
		}
	}
	if cr.prompt, err = parseTemplate("prompt", r.Prompt, DefaultPrompt, sample); err != nil {
		return cr, err
	}
	return cr, nil
}

// compileAssociations upper-cases and checks a rule's authorAssociation:
// none gives DefaultAuthorAssociation(), [any] gives nil (everyone).
func compileAssociations(list []string) ([]string, error) {
	if len(list) == 0 {
		return DefaultAuthorAssociation(), nil
	}
	out := make([]string, len(list))
	for i, a := range list {
		out[i] = strings.ToUpper(strings.TrimSpace(a))
		if out[i] == AnyAuthor {
			if len(list) > 1 {
				return nil, errors.New("authorAssociation: any accepts everyone; list it alone")
			}
			return nil, nil
		}
		if !slices.Contains(authorAssociations, out[i]) {
			return nil, fmt.Errorf("authorAssociation: %q is not one of %s, or any", a, strings.Join(authorAssociations, ", "))
		}
	}
	return out, nil
}

// parseTemplate parses text (or def) and runs it on sample, so a field the
// view lacks is an error at load time.
func parseTemplate(name, text, def string, sample map[string]any) (*template.Template, error) {
	if text == "" {
		text = def
	}
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := t.Execute(&bytes.Buffer{}, sample); err != nil {
		return nil, fmt.Errorf("%s: %w (fields: event, action, repo, owner, name, number, title, body, comment, sender, association, url, labels, label, pr)", name, err)
	}
	return t, nil
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// matches reports whether ev meets every condition of r.
func (r compiledRule) matches(ev *Event) bool {
	if ev.Name != r.Event {
		return false
	}
	if len(r.actions) > 0 && !slices.Contains(r.actions, ev.Action) {
		return false
	}
	if r.Label != "" && !strings.EqualFold(ev.Label, r.Label) {
		return false
	}
	if len(r.AuthorAssociation) > 0 && !slices.Contains(r.AuthorAssociation, strings.ToUpper(ev.Association)) {
		return false
	}
	if r.mention != nil && !r.mention.MatchString(ev.text()) {
		return false
	}
	return true
}

// Intents maps ev to its intents: every matching rule's, or the
// executable's. An error gives none.
func (p *Policy) Intents(ev *Event) ([]Intent, error) {
	return p.IntentsContext(context.Background(), ev, "")
}

// IntentsContext is Intents with the delivery ID (passed to an executable
// policy) and a context.
func (p *Policy) IntentsContext(ctx context.Context, ev *Event, delivery string) ([]Intent, error) {
	var out []Intent
	if p.exec != nil {
		var err error
		if out, err = p.exec.run(ctx, ev, delivery, p.box, p.protected); err != nil {
			return nil, err
		}
	} else {
		view := ev.View()
		for i, r := range p.rules {
			if !r.matches(ev) {
				continue
			}
			var s, pr strings.Builder
			if err := r.session.Execute(&s, view); err != nil {
				return nil, fmt.Errorf("github: rules[%d] session: %w", i, err)
			}
			if err := r.prompt.Execute(&pr, view); err != nil {
				return nil, fmt.Errorf("github: rules[%d] prompt: %w", i, err)
			}
			out = append(out, Intent{Session: strings.TrimSpace(s.String()), Prompt: strings.TrimSpace(pr.String()), Review: r.Review})
		}
	}
	for i, in := range out {
		if err := checkIntent(in); err != nil {
			return nil, fmt.Errorf("github: intent %d: %w", i, err)
		}
	}
	return out, nil
}

// writtenFields are the view's fields people write; a session ID made
// from them would be chosen by whoever opens an issue or comments.
var writtenFields = []string{"title", "body", "comment", "label"}

// usesWrittenText reports whether session template t renders differently
// when only the written fields differ (however it reaches them: a field,
// index, with, range, printf…).
func usesWrittenText(t *template.Template, sample map[string]any) bool {
	render := func(v string) (string, bool) {
		view := make(map[string]any, len(sample))
		for k, x := range sample {
			view[k] = x
		}
		for _, f := range writtenFields {
			view[f] = v
		}
		view["labels"] = []string{v}
		var b bytes.Buffer
		if err := t.Execute(&b, view); err != nil {
			return "", false
		}
		return b.String(), true
	}
	a, okA := render("a")
	b, okB := render("bb/delegate-x")
	return !okA || !okB || a != b || namesWrittenText(t.Root)
}

// namesWrittenText reports whether a template's tree names a written
// field anywhere, run or not (a branch the sample does not take): as a
// field (.title), or as a string (index . "title").
func namesWrittenText(n parse.Node) bool {
	written := func(name string) bool { return name == "labels" || slices.Contains(writtenFields, name) }
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return false
		}
		return slices.ContainsFunc(n.Nodes, namesWrittenText)
	case *parse.ActionNode:
		return namesWrittenText(n.Pipe)
	case *parse.PipeNode:
		if n == nil {
			return false
		}
		for _, c := range n.Cmds {
			if slices.ContainsFunc(c.Args, namesWrittenText) {
				return true
			}
		}
		return false
	case *parse.IfNode:
		return namesWrittenText(n.Pipe) || namesWrittenText(n.List) || namesWrittenText(n.ElseList)
	case *parse.RangeNode:
		return namesWrittenText(n.Pipe) || namesWrittenText(n.List) || namesWrittenText(n.ElseList)
	case *parse.WithNode:
		return namesWrittenText(n.Pipe) || namesWrittenText(n.List) || namesWrittenText(n.ElseList)
	case *parse.TemplateNode:
		return true // another template: not checked, refused
	case *parse.FieldNode:
		return slices.ContainsFunc(n.Ident, written)
	case *parse.ChainNode:
		return slices.ContainsFunc(n.Field, written) || namesWrittenText(n.Node)
	case *parse.VariableNode:
		return slices.ContainsFunc(n.Ident[1:], written)
	case *parse.StringNode:
		return written(n.Text)
	}
	return false
}

// checkIntent refuses an intent no turn can be made of.
func checkIntent(in Intent) error {
	switch {
	case in.Session == "":
		return errors.New("empty session")
	case len(in.Session) > maxSession:
		return fmt.Errorf("session longer than %d bytes", maxSession)
	case strings.ContainsFunc(in.Session, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return fmt.Errorf("session %q contains spaces or control characters", in.Session)
	case strings.TrimSpace(in.Prompt) == "":
		return fmt.Errorf("session %q: empty prompt", in.Session)
	}
	return checkSessionScope(in.Session)
}

// checkSessionScope refuses a session of another agent ("<agent>/…": a
// repository owner may be named like an agent) or below a session (a
// sub-agent's, "…/delegate-…").
func checkSessionScope(session string) error {
	before, _, nested := strings.Cut(session, "/")
	switch {
	case nested && !strings.Contains(before, ":"):
		return fmt.Errorf("session %q would be agent %q's session: start session IDs with a prefix such as \"github:\"", session, before)
	case strings.Contains(session, "/delegate-"):
		return fmt.Errorf("session %q names a sub-agent's session (…/delegate-…)", session)
	}
	return nil
}

// maxPolicyOutput caps an executable policy's stdout.
const maxPolicyOutput = 256 << 10

// execEnv is the whole environment of an executable policy: no secret of
// the ingress reaches it.
var execEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}

// run runs the executable with ev on stdin, bounded by its timeout, in the
// tool sandbox box: read-only, without the network, the secret paths of
// protected hidden, no secrets in its environment, every process it
// starts killed on timeout. Without a sandbox it does not run.
func (e *ExecPolicy) run(ctx context.Context, ev *Event, delivery string, box *sandbox.Sandbox, protected []tools.Protected) ([]Intent, error) {
	if box == nil {
		return nil, fmt.Errorf("github: policy %s: no tool sandbox to run it in, and executable policies never run unconfined", e.Exec)
	}
	in, err := json.Marshal(map[string]any{"event": ev.Name, "action": ev.Action, "delivery": delivery,
		"view": ev.View(), "payload": ev.Raw})
	if err != nil {
		return nil, fmt.Errorf("github: policy: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	var stdout, stderr capped
	stdout.max, stderr.max = maxPolicyOutput, 4<<10
	cmd := &sandbox.Cmd{Path: e.Exec, Args: append([]string{e.Exec}, e.Args...), Env: execEnv, Dir: filepath.Dir(e.Exec),
		Stdin: bytes.NewReader(in), Stdout: &stdout, Stderr: &stderr, WaitDelay: 200 * time.Millisecond}
	tools.ConfineRead(cmd, protected)
	p, err := box.Start(ctx, cmd)
	if err != nil {
		return nil, fmt.Errorf("github: policy %s: %w", e.Exec, err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		p.Kill()
		<-done //nolint:errcheck // killed: the timeout is the error
		return nil, fmt.Errorf("github: policy %s: timed out after %s", e.Exec, e.timeout)
	}
	if err != nil && !errors.Is(err, sandbox.ErrWaitDelay) {
		return nil, fmt.Errorf("github: policy %s: %w: %s", e.Exec, err, strings.TrimSpace(stderr.String()))
	}
	if stdout.over {
		return nil, fmt.Errorf("github: policy %s: output over %d bytes", e.Exec, maxPolicyOutput)
	}
	out := bytes.TrimSpace(stdout.Bytes())
	if len(out) == 0 {
		return nil, nil
	}
	var intents []Intent
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&intents); err != nil {
		return nil, fmt.Errorf("github: policy %s: output is not a JSON array of {session, prompt, review}: %w", e.Exec, err)
	}
	return intents, nil
}

// capped is a buffer that keeps at most max bytes and says when more came.
type capped struct {
	bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); len(p) > room {
		c.over = true
		if room > 0 {
			c.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return c.Buffer.Write(p)
}
