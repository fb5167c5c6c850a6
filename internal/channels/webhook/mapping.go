package webhook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode"

	"github.com/google/cel-go/cel"
)

// maxTemplated bounds a rendered session or key; a longer key is hashed.
const maxTemplated = 200

// maxPrompt bounds a rendered prompt (the body is already capped at 1 MiB).
const maxPrompt = 256 << 10

// mapping maps a verified event to a turn.
type mapping struct {
	name                 string
	when                 cel.Program
	session, prompt, key *template.Template
}

// Event is what templates and the when: expression see of a request.
type Event struct {
	// Body is the JSON body decoded (nil when the body is not JSON).
	Body any
	// Headers are the request's headers, lower-case names, first values.
	Headers map[string]string
	// Raw is the body as text.
	Raw string
	// ID is the delivery's identity: the scheme's signed ID (webhook-id),
	// else the hex SHA-256 of the body.
	ID   string
	Name string
}

func (e Event) data() map[string]any {
	return map[string]any{"body": e.Body, "headers": e.Headers, "raw": e.Raw, "id": e.ID, "name": e.Name}
}

var funcs = template.FuncMap{
	// json renders a value as JSON.
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	// header is the value of a header, any case.
	"header": func(h map[string]string, name string) string { return h[strings.ToLower(name)] },
}

func newMapping(name string, cfg Config) (*mapping, error) {
	m := &mapping{name: name}
	parse := func(field, text, def string) (*template.Template, error) {
		if text == "" {
			text = def
		}
		t, err := template.New(field).Funcs(funcs).Option("missingkey=zero").Parse(text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		return t, nil
	}
	var err error
	if m.session, err = parse("session", cfg.Session, KindPrefix+name); err != nil {
		return nil, err
	}
	if err := checkSessionTemplate(name, m.session); err != nil {
		return nil, err
	}
	if m.prompt, err = parse("prompt", cfg.Prompt, "Webhook "+name+" event:\n\n{{.raw}}"); err != nil {
		return nil, err
	}
	if m.key, err = parse("key", cfg.Key, "{{.id}}"); err != nil {
		return nil, err
	}
	if cfg.When != "" {
		env, err := cel.NewEnv(
			cel.Variable("body", cel.DynType),
			cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
			cel.Variable("raw", cel.StringType),
			cel.Variable("id", cel.StringType),
			cel.Variable("name", cel.StringType),
		)
		if err != nil {
			return nil, fmt.Errorf("when: %w", err)
		}
		ast, iss := env.Compile(cfg.When)
		if iss != nil && iss.Err() != nil {
			return nil, fmt.Errorf("when: %w", iss.Err())
		}
		if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
			return nil, fmt.Errorf("when: %q gives %s, not a bool", cfg.When, ast.OutputType())
		}
		if m.when, err = env.Program(ast, cel.CostLimit(100000)); err != nil {
			return nil, fmt.Errorf("when: %w", err)
		}
	}
	return m, nil
}

// An endpoint's sessions are its own: "hook:<name>", or "hook:<name>:"
// followed by what the template renders, without "/". A session template
// starting with anything else could name any session — another channel's
// conversation, another agent's ("<agent>/…"), another endpoint's
// ("hook:<name>2") — and is refused when the file loads; a value with "/"
// could name a session below one of the endpoint's own — a sub-agent's
// ("…/delegate-…"), a named sub-session ("…/<agent>:<name>") — and is
// refused when rendered.

// checkSessionTemplate refuses a session template whose output does not
// provably start with the endpoint's namespace: its leading literal text
// must be "hook:<name>:" (or the whole template "hook:<name>").
func checkSessionTemplate(name string, t *template.Template) error {
	own := KindPrefix + name
	var lead string
	nodes := t.Root.Nodes
	if len(nodes) > 0 {
		if text, ok := nodes[0].(*parse.TextNode); ok {
			lead = strings.TrimLeftFunc(string(text.Text), unicode.IsSpace)
		}
	}
	if strings.HasPrefix(lead, own+":") || (len(nodes) == 1 && strings.TrimSpace(lead) == own) {
		return nil
	}
	return fmt.Errorf("session: %q could name a session that is not this endpoint's: write it as %q followed by the part "+
		"that varies (e.g. %q), or %q for one session", t.Root.String(), own+":", own+":{{.body.customer}}", own)
}

// ownSession refuses a rendered session outside the endpoint's namespace
// or below one of its sessions.
func (m *mapping) ownSession(session string) error {
	own := KindPrefix + m.name
	rest, ok := strings.CutPrefix(session, own+":")
	switch {
	case session == own:
		return nil
	case !ok:
		return fmt.Errorf("session: %q is not one of this endpoint's sessions (%s or %s:…)", session, own, own)
	case rest == "":
		return fmt.Errorf("session: %q: the template gave nothing after %s: (a field missing from the event?)", session, own)
	case strings.Contains(rest, "/"):
		return fmt.Errorf("session: %q contains \"/\", which separates a session from those below it (sub-agents, named sub-sessions): "+
			"map the event to a value without it", session)
	}
	return nil
}

// newEvent reads a verified request. id is the scheme's signed delivery ID
// ("" for none).
func newEvent(name string, h http.Header, body []byte, id string) Event {
	e := Event{Headers: map[string]string{}, Raw: string(body), ID: id, Name: name}
	for k, v := range h {
		if len(v) > 0 {
			e.Headers[strings.ToLower(k)] = v[0]
		}
	}
	var v any
	if json.Unmarshal(body, &v) == nil {
		e.Body = v
	}
	if e.ID == "" {
		sum := sha256.Sum256(body)
		e.ID = hex.EncodeToString(sum[:])
	}
	return e
}

// match evaluates when: (true without one). An expression that fails on
// this event (a missing field) does not match it.
func (m *mapping) match(e Event) (bool, error) {
	if m.when == nil {
		return true, nil
	}
	vars := map[string]any{"body": e.Body, "headers": e.Headers, "raw": e.Raw, "id": e.ID, "name": e.Name}
	out, _, err := m.when.Eval(vars)
	if err != nil {
		return false, fmt.Errorf("when: %w", err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("when: gave %v, not a bool", out.Value())
	}
	return b, nil
}

// turn renders the event's session, prompt and key (without the kind).
func (m *mapping) turn(e Event) (session, prompt, key string, err error) {
	data := e.data()
	render := func(t *template.Template) (string, error) {
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return "", fmt.Errorf("%s: %w", t.Name(), err)
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), nil
	}
	if session, err = render(m.session); err != nil {
		return "", "", "", err
	}
	session = strings.TrimSpace(session)
	if session == "" || len(session) > maxTemplated || strings.IndexFunc(session, unicode.IsControl) >= 0 {
		return "", "", "", fmt.Errorf("session: %q is not a session ID (1..%d characters, no control characters)", session, maxTemplated)
	}
	if err := m.ownSession(session); err != nil {
		return "", "", "", err
	}
	if prompt, err = render(m.prompt); err != nil {
		return "", "", "", err
	}
	if strings.TrimSpace(prompt) == "" {
		return "", "", "", errors.New("prompt: empty")
	}
	if len(prompt) > maxPrompt {
		prompt = prompt[:maxPrompt]
	}
	if key, err = render(m.key); err != nil {
		return "", "", "", err
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return "", "", "", errors.New("key: empty")
	}
	if len(key) > maxTemplated || strings.IndexFunc(key, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		sum := sha256.Sum256([]byte(key))
		key = hex.EncodeToString(sum[:])
	}
	return session, prompt, key, nil
}
