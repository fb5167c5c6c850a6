package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// AssistantConfig is channels/slack.yaml's assistant section: what an AI
// app's assistant threads (Slack's split view) show.
type AssistantConfig struct {
	// Title heads the suggested prompts ("" for Slack's default).
	Title string `yaml:"title"`
	// Prompts are suggested when a person opens a new assistant thread
	// (at most 4).
	Prompts []AssistantPrompt `yaml:"prompts"`
}

// AssistantPrompt is one suggested prompt: the button's title and the
// message it sends.
type AssistantPrompt struct {
	Title   string `yaml:"title"`
	Message string `yaml:"message"`
}

// maxPrompts is the most suggested prompts Slack shows.
const maxPrompts = 4

// check validates the section.
func (c AssistantConfig) check() error {
	if len(c.Prompts) > maxPrompts {
		return fmt.Errorf("assistant.prompts: %d prompts, Slack shows at most %d", len(c.Prompts), maxPrompts)
	}
	for i, p := range c.Prompts {
		if strings.TrimSpace(p.Title) == "" || strings.TrimSpace(p.Message) == "" {
			return fmt.Errorf("assistant.prompts[%d]: title and message are both required", i)
		}
	}
	return nil
}

// titleLimit caps a thread title taken from its first message.
const titleLimit = 80

// untitledLimit bounds the assistant threads waiting for their first
// message (the oldest are forgotten first).
const untitledLimit = 10000

// Assistant serves the assistant thread surface of an AI app: on
// assistant_thread_started it sets the configured suggested prompts, and
// the first message a person sends in that thread becomes its title. Both
// are courtesies done in the background: a failure is logged. The title
// is remembered in this process only: a thread started before a restart
// keeps Slack's default title.
type Assistant struct {
	api    *slack.Client
	Config AssistantConfig
	// Logger logs failures (nil: slog.Default()).
	Logger *slog.Logger

	mu       sync.Mutex
	untitled map[string]time.Time
	wg       sync.WaitGroup
}

// NewAssistant returns the assistant surface with token; apiURL ("" =
// Slack's) overrides the Web API base URL.
func NewAssistant(token, apiURL string, cfg AssistantConfig) *Assistant {
	opts := []slack.Option{slack.OptionHTTPClient(&http.Client{Timeout: HTTPTimeout})}
	if apiURL != "" {
		opts = append(opts, slack.OptionAPIURL(strings.TrimSuffix(apiURL, "/")+"/"))
	}
	return &Assistant{api: slack.New(token, opts...), Config: cfg, untitled: map[string]time.Time{}}
}

func (a *Assistant) log() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}

// Wait waits for the calls started in the background (tests).
func (a *Assistant) Wait() { a.wg.Wait() }

// started handles assistant_thread_started: the thread waits for its title
// and shows the suggested prompts.
func (a *Assistant) started(e *slackevents.AssistantThreadStartedEvent) {
	t := e.AssistantThread
	if t.ChannelID == "" || t.ThreadTimeStamp == "" {
		return
	}
	a.mu.Lock()
	if len(a.untitled) >= untitledLimit {
		oldest, at := "", time.Time{}
		for k, v := range a.untitled {
			if oldest == "" || v.Before(at) {
				oldest, at = k, v
			}
		}
		delete(a.untitled, oldest)
	}
	a.untitled[t.ChannelID+"/"+t.ThreadTimeStamp] = time.Now()
	a.mu.Unlock()
	if len(a.Config.Prompts) == 0 {
		return
	}
	p := slack.AssistantThreadsSetSuggestedPromptsParameters{Title: a.Config.Title, ChannelID: t.ChannelID, ThreadTS: t.ThreadTimeStamp}
	for _, x := range a.Config.Prompts {
		p.AddPrompt(x.Title, x.Message)
	}
	a.background(func(ctx context.Context) error { return a.api.SetAssistantThreadsSuggestedPromptsContext(ctx, p) },
		"suggested prompts", t.ChannelID, t.ThreadTimeStamp)
}

// message titles an assistant thread waiting for its first message.
func (a *Assistant) message(channel, thread, text string) {
	if thread == "" || strings.TrimSpace(text) == "" {
		return
	}
	key := channel + "/" + thread
	a.mu.Lock()
	_, waiting := a.untitled[key]
	delete(a.untitled, key)
	a.mu.Unlock()
	if !waiting {
		return
	}
	title := strings.Join(strings.Fields(text), " ")
	if utf8.RuneCountInString(title) > titleLimit {
		head, _ := cutRunes(title, titleLimit-1)
		title = head + "…"
	}
	p := slack.AssistantThreadsSetTitleParameters{ChannelID: channel, ThreadTS: thread, Title: title}
	a.background(func(ctx context.Context) error { return a.api.SetAssistantThreadsTitleContext(ctx, p) }, "title", channel, thread)
}

// background runs call off the event's acknowledgement path, with a
// context of its own: the call outlives the event's handling.
func (a *Assistant) background(call func(context.Context) error, what, channel, thread string) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), HTTPTimeout)
		defer cancel()
		if err := call(ctx); err != nil {
			a.log().Warn("slack: assistant thread "+what+" not set", "channel", channel, "thread", thread, "error", err)
		}
	}()
}

// Statuses a turn shows in its assistant thread.
const (
	// runningStatus is shown while a tool runs: "is running <tool>…".
	runningStatus = "is running %s…"
	// noStatus clears the status (the turn ended).
	noStatus = ""
)

// statusUnknown is what a renderer that has set no status assumes the
// thread shows: anything, so its first status (a clear included) is sent.
const statusUnknown = "\x00unknown"

// workspaceRefusals are the Slack answers saying the app may not set
// assistant statuses at all (not an AI app, a token or scope without the
// right): the workspace's statuses stop for this process.
var workspaceRefusals = map[string]bool{
	"not_allowed": true, "not_allowed_token_type": true, "missing_scope": true, "unknown_method": true,
	"access_denied": true, "no_permission": true, "feature_not_enabled": true, "team_access_not_granted": true,
	"method_deprecated": true,
}

// status shows want as the thread's assistant status when it differs from
// what the renderer last sent. A failure is logged; the status is sent
// again at the next change (a network error, a rate limit). A refusal of
// the method (workspaceRefusals) stops statuses for the workspace; any
// other refusal (a thread Slack does not take) stops them for this reply.
func (m *render) status(ctx context.Context, want string) {
	if m.thread == "" || m.statusOff || want == m.statusShown {
		return
	}
	m.statusShown = want
	m.statusOff = m.r.sendStatus(ctx, m.team, m.channel, m.thread, want)
}

// sendStatus sets a thread's assistant status unless the workspace's
// statuses are off; it reports whether Slack refused it for this thread.
func (r *Replier) sendStatus(ctx context.Context, team, channel, thread, want string) (refused bool) {
	if _, off := r.noStatus.Load(team); off {
		return false
	}
	err := r.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{
		ChannelID: channel, ThreadTS: thread, Status: want})
	if err == nil {
		return false
	}
	var se slack.SlackErrorResponse
	switch {
	case errors.As(err, &se) && workspaceRefusals[se.Err]:
		r.noStatus.Store(team, true)
		r.log().Info("slack: assistant statuses are off for this workspace", "team", team, "error", se.Err)
	case errors.As(err, &se):
		r.log().Debug("slack: assistant status refused for this thread", "channel", channel, "thread", thread, "error", se.Err)
		return true
	default:
		r.log().Debug("slack: assistant status not set; sent again at the next change", "channel", channel, "thread", thread, "error", err)
	}
	return false
}
