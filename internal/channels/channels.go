// Package channels is the framework every chat or webhook channel (Slack,
// Feishu/Lark, GitHub, Telegram) is built on. A channel is two small parts:
//
//   - a Door, which verifies a webhook request on its capped raw body before
//     parsing anything, and parses it into deliveries plus the immediate HTTP
//     answer;
//   - a Replier, which posts (or updates) the final answer of a turn.
//
// The door's handler (Handler) hands each delivery durably to Temporal with
// Signal-With-Start on the session workflow and answers at once: it never
// waits for a worker or a model. Deduplication of deliveries, queueing and
// the reply happen in the session workflow (workflows.SignalDeliver,
// workflows.ActivityChannelReply), so they are exactly-once across retries
// and restarts. Channels are enabled by files channels/<kind>.yaml of the
// agent dir; a kind registers its factory with Register.
package channels

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/workspace"
)

// Delivery is one user message a door accepted.
type Delivery struct {
	// Kind is the channel kind ("slack").
	Kind string
	// ID is the platform's identity of the user message (Slack:
	// team:channel:ts). It deduplicates retried deliveries and overlapping
	// events of the same message.
	ID string
	// Session is the session the message belongs to.
	Session string
	Prompt  agent.Prompt
	// Reply is the platform's reply target, opaque to the framework.
	Reply json.RawMessage
}

// Key is the turn's idempotency key: "<kind>:<ID>".
func (d Delivery) Key() string { return d.Kind + ":" + d.ID }

// Answer is a door's immediate HTTP answer.
type Answer struct {
	Status      int
	ContentType string
	Body        []byte
	// Header holds extra response headers (e.g. X-Slack-No-Retry).
	Header map[string]string
}

// Request is a webhook request as a door sees it: headers and the capped
// raw body.
type Request struct {
	Header map[string][]string
	Body   []byte
}

// Door verifies and parses a channel's webhook requests.
type Door interface {
	// Kind is the channel kind.
	Kind() string
	// Path is the ingress route ("/slack"), served for POST.
	Path() string
	// Verify checks the request's signature (and timestamp window) over the
	// raw body; an error answers 401 with nothing started.
	Verify(r Request) error
	// Parse turns a verified request into deliveries and the answer.
	Parse(r Request) ([]Delivery, Answer, error)
}

// Replier posts a turn's answer on the platform.
type Replier interface {
	// Kind is the channel kind.
	Kind() string
	// Post posts text to target and returns the platform's reference of the
	// new message.
	Post(ctx context.Context, target json.RawMessage, text string) (string, error)
	// Update replaces the text of the message ref posted to target.
	Update(ctx context.Context, target json.RawMessage, ref, text string) error
}

// Channel is one enabled channel.
type Channel struct {
	// File is the channels/<kind>.yaml file that enabled it.
	File    string
	Door    Door
	Replier Replier
}

// Factory builds a channel from its file's YAML (already read) and the
// environment. It must reject unknown keys and missing secrets.
type Factory func(file []byte, getenv func(string) string) (*Channel, error)

var (
	regMu    sync.Mutex
	registry = map[string]Factory{}
)

// Register makes kind available to Load. It panics on a duplicate kind.
func Register(kind string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[kind]; dup {
		panic("channels: kind registered twice: " + kind)
	}
	registry[kind] = f
}

// Kinds lists the registered kinds.
func Kinds() []string {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]string, 0, len(registry))
	for k := range registry {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Load builds the enabled channels of files (workspace.Channels()). A
// disabled file is skipped; an unknown kind, a bad key, a missing secret or
// two channels on one route stop with an error naming the file.
func Load(files []workspace.FileEntry, getenv func(string) string) ([]*Channel, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var out []*Channel
	paths := map[string]string{}
	for _, f := range files {
		if !f.Enabled {
			continue
		}
		regMu.Lock()
		factory, ok := registry[f.Name]
		regMu.Unlock()
		if !ok {
			return nil, fmt.Errorf("channel %s: unknown kind %q (known: %v)", f.Path, f.Name, Kinds())
		}
		data, err := os.ReadFile(f.Path)
		if err != nil {
			return nil, fmt.Errorf("channel %s: %w", f.Path, err)
		}
		ch, err := factory(data, getenv)
		if err != nil {
			return nil, fmt.Errorf("channel %s: %w", f.Path, err)
		}
		ch.File = f.Path
		if prev, dup := paths[ch.Door.Path()]; dup {
			return nil, fmt.Errorf("channel %s: route %s is already served by %s", f.Path, ch.Door.Path(), prev)
		}
		paths[ch.Door.Path()] = f.Path
		out = append(out, ch)
	}
	return out, nil
}

// Decode decodes a channel file's YAML into v, rejecting unknown keys. An
// empty file leaves v unchanged.
func Decode(file []byte, v any) error {
	if len(bytes.TrimSpace(file)) == 0 {
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(file))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
