package feishu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	lark "github.com/larksuite/oapi-sdk-go/v3"
	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	larkcardkit "github.com/larksuite/oapi-sdk-go/v3/service/cardkit/v1"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// Replier renders turns' answers with the open API: a CardKit streaming
// card replied to the user's message (in its thread), or — when card
// creation fails — an interactive card message patched in place.
type Replier struct {
	kind string
	api  *lark.Client
	log  *slog.Logger
	// Files bounds the files Fetch downloads (config maxFileBytes); set it
	// before the first Fetch.
	Files channels.FileLimits

	profile   Profile
	appID     string
	appSecret string
	filesOnce sync.Once
	files     *lark.Client
	// UpdateEvery is the least interval between two updates of one card
	// (CardKit allows 10 per second per card); default 200 ms.
	UpdateEvery time.Duration
	// PatchEvery is the least interval between two patches of a card
	// message (5 QPS per message); default 1 s.
	PatchEvery time.Duration
	// Refs keeps the message IDs of the parts after the first of an answer
	// longer than one card (the session store's replies table), so a
	// retried reply patches them instead of posting them again; with nil
	// only the parts' idempotency uuids (1 h on the platform) guard them.
	Refs channels.Refs
	// NoButtons asks for approvals with cards without buttons: the app's
	// webhook has no Encrypt Key, so its door refuses every click.
	NoButtons bool
}

// NewReplier returns the replier of profile p (its BaseURL, possibly
// overridden) for app appID.
func NewReplier(p Profile, appID, appSecret string, log *slog.Logger) *Replier {
	if log == nil {
		log = slog.Default()
	}
	api := lark.NewClient(appID, appSecret,
		lark.WithOpenBaseUrl(p.BaseURL),
		lark.WithReqTimeout(15*time.Second),
		lark.WithLogger(sdkLogger{log: log.With("kind", p.Kind)}),
		lark.WithLogLevel(larkcore.LogLevelWarn))
	return &Replier{kind: p.Kind, api: api, log: log, UpdateEvery: 200 * time.Millisecond, PatchEvery: time.Second,
		profile: p, appID: appID, appSecret: appSecret}
}

// filesAPI is the client of downloads, built on first use with the
// replier's Files limits.
func (r *Replier) filesAPI() *lark.Client {
	r.filesOnce.Do(func() {
		r.files = newFilesClient(r.profile, r.appID, r.appSecret, r.Files.WithDefaults().MaxFileBytes, sdkLogger{log: r.log.With("kind", r.kind)})
	})
	return r.files
}

// Kind implements channels.Replier.
func (r *Replier) Kind() string { return r.kind }

// BotOpenID fetches the bot's open_id from the bot info API.
func (r *Replier) BotOpenID(ctx context.Context) (string, error) {
	resp, err := r.api.Get(ctx, "/open-apis/bot/v3/info", nil, larkcore.AccessTokenTypeTenant)
	if err != nil {
		return "", fmt.Errorf("%s: bot info: %w", r.kind, err)
	}
	var out struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
		Bot  struct {
			OpenID string `json:"open_id"`
		} `json:"bot"`
	}
	if err := json.Unmarshal(resp.RawBody, &out); err != nil {
		return "", fmt.Errorf("%s: bot info: %w", r.kind, err)
	}
	if out.Code != 0 || out.Bot.OpenID == "" {
		return "", fmt.Errorf("%s: bot info: code %d: %s", r.kind, out.Code, out.Msg)
	}
	return out.Bot.OpenID, nil
}

// Render implements channels.Replier. ref is what an earlier attempt
// stored: "card:<card_id>:<created ms>[:<message_id>]" for a streaming card
// (posted once the message ID is there), "msg:<message_id>" for a card
// message patched in place.
func (r *Replier) Render(_ context.Context, t wire.Target, ref string) (channels.Render, error) {
	if t.Chat == "" || t.Message == "" {
		return nil, fmt.Errorf("%s: reply target needs chat and message, got %q / %q", r.kind, t.Chat, t.Message)
	}
	seed := r.kind + "\x00" + t.Chat + "\x00" + t.Message
	if t.Turn != "" && !strings.HasPrefix(t.Turn, r.kind+":"+t.Message) {
		// The answer of a command sent by a button (a second Stop click:
		// its key names the click, not the message) answers the turn's
		// message too, but is a message of its own, never the turn's
		// reply.
		seed += "\x00" + t.Turn
	}
	sum := sha256.Sum256([]byte(seed))
	m := &render{r: r, target: t, uuid: hex.EncodeToString(sum[:])[:40], turn: t.Turn}
	if !r.NoButtons {
		// Clicks are verified (an Encrypt Key, or the long connection):
		// the live reply carries a Stop button.
		m.stop = stopValue(t)
	}
	if m.turn == "" {
		m.turn = r.kind + ":" + t.Message
	}
	if ref != "" {
		if err := m.parseRef(ref); err != nil {
			return nil, err
		}
		m.resumed = true
	}
	return m, nil
}

// Reply modes.
const (
	modeCard = "card"
	modeMsg  = "msg"
)

// resumeMargin is added to the sequence of a card continued by another
// attempt (maybe another worker), so its sequence numbers stay above the
// earlier attempt's despite clock skew between workers.
const resumeMargin = 1000

// render is one turn's reply.
type render struct {
	r      *Replier
	target wire.Target
	// uuid is the idempotency key of the turn's reply (1 h on the
	// platform): a retried post is the same message.
	uuid string
	// turn is the turn's key; the later parts of a long answer derive
	// their uuids and stored references from it.
	turn string
	mode string
	card string
	// created is the card's creation time (Unix ms); sequence numbers are
	// milliseconds since, so they increase across attempts and workers.
	created int64
	msgID   string
	lastSeq int
	resumed bool
	// cardFailed is set when card creation failed: degrade to a card
	// message.
	cardFailed bool
	shown      string
	shownAt    time.Time
	wait       time.Time
	settled    string
	// parts holds the message IDs of the answer's later parts this
	// attempt posted or found, by part number (2, 3, …).
	parts map[int]string
	// stop is the value of the live reply's Stop button (nil: none); the
	// settled reply has none.
	stop *buttonValue
}

func (m *render) parseRef(ref string) error {
	parts := strings.Split(ref, ":")
	switch {
	case parts[0] == modeCard && (len(parts) == 3 || len(parts) == 4) && parts[1] != "":
		created, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			return fmt.Errorf("%s: bad reply reference %q", m.r.kind, ref)
		}
		m.mode, m.card, m.created = modeCard, parts[1], created
		if len(parts) == 4 {
			m.msgID = parts[3]
		}
	case parts[0] == modeMsg && len(parts) == 2 && parts[1] != "":
		m.mode, m.msgID = modeMsg, parts[1]
	default:
		return fmt.Errorf("%s: bad reply reference %q", m.r.kind, ref)
	}
	return nil
}

// Ref implements channels.Render.
func (m *render) Ref() string {
	switch m.mode {
	case modeCard:
		ref := modeCard + ":" + m.card + ":" + strconv.FormatInt(m.created, 10)
		if m.msgID != "" {
			ref += ":" + m.msgID
		}
		return ref
	case modeMsg:
		return modeMsg + ":" + m.msgID
	}
	return ""
}

// seq returns the next sequence number of the card: strictly increasing.
func (m *render) seq() int {
	s := int(time.Now().UnixMilli() - m.created)
	if m.resumed {
		s += resumeMargin
	}
	if s <= m.lastSeq {
		s = m.lastSeq + 1
	}
	if s < 1 {
		s = 1
	}
	m.lastSeq = s
	return s
}

// preview is what the card shows while the turn runs.
func preview(v *channels.View) string {
	text := v.Text()
	var tools, progress []string
	for _, t := range v.Tools {
		if t.Status == channels.ToolRunning {
			tools = append(tools, "`"+t.Name+"`")
			if p := t.ProgressLine(); p != "" {
				// A tool's output: text, never tags or entities.
				progress = append(progress, "\n↳ "+markdownEscaper.Replace(p))
			}
		}
	}
	switch {
	case len(tools) > 0 && text != "":
		return text + "\n\n_Using " + strings.Join(tools, ", ") + "…_" + strings.Join(progress, "")
	case len(tools) > 0:
		return "_Using " + strings.Join(tools, ", ") + "…_" + strings.Join(progress, "")
	case text == "" && v.Thinking:
		return "_Thinking…_"
	case text == "" && v.Queued:
		return "> ⏳ Queued"
	}
	return text
}

// Show implements channels.Render: it creates the streaming card (first
// call with something to show), posts it (next call, after the caller
// stored the card's reference), then updates its content at most every
// UpdateEvery. When card creation fails it posts a card message instead
// and patches it at most every PatchEvery.
func (m *render) Show(ctx context.Context, v *channels.View) error {
	text := preview(v)
	if text == "" || (text == m.shown && m.msgID != "") || m.settled != "" {
		return nil
	}
	now := time.Now()
	if now.Before(m.wait) {
		return nil
	}
	err := m.show(ctx, text, now)
	if err != nil {
		m.wait = now.Add(2 * time.Second)
	}
	return err
}

func (m *render) show(ctx context.Context, text string, now time.Time) error {
	switch {
	case m.mode == "" && !m.cardFailed:
		if err := m.createCard(ctx, text, now); err != nil {
			m.cardFailed = true
			m.r.log.Warn("feishu: streaming card unavailable, replying with a card message", "kind", m.r.kind, "error", err)
			return m.postMessage(ctx, text, true)
		}
		return nil
	case m.mode == "":
		return m.postMessage(ctx, text, true)
	case m.mode == modeCard && m.msgID == "":
		if err := m.postCard(ctx); err != nil {
			return err
		}
		m.shownAt = now
		if text == m.shown {
			return nil
		}
		return m.updateContent(ctx, text, now)
	case m.mode == modeCard:
		if now.Sub(m.shownAt) < m.r.UpdateEvery {
			return nil
		}
		return m.updateContent(ctx, text, now)
	default:
		if now.Sub(m.shownAt) < m.r.PatchEvery {
			return nil
		}
		if err := m.patch(ctx, text, true); err != nil {
			return err
		}
		m.shownAt = now
		return nil
	}
}

// Finish implements channels.Render: the card (or card message) is
// settled to text with streaming closed; with nothing posted yet, text is
// posted as a card message. A text longer than one card (maxCardText) is
// split (channels.SplitText): the card holds the first part and each
// further part is a card message replying to the same message, posted in
// order. Idempotent: the platform calls carry uuids (one per part, from the
// turn's key), and a part whose reference is stored is patched, not posted
// again.
func (m *render) Finish(ctx context.Context, text string) error {
	if m.settled == text && m.mode != "" {
		return nil
	}
	parts := channels.SplitText(text, maxCardText)
	switch m.mode {
	case modeCard:
		if err := m.settleCard(ctx, parts[0]); err != nil {
			return err
		}
		if m.msgID == "" {
			if err := m.postCard(ctx); err != nil {
				return err
			}
		}
	case modeMsg:
		if err := m.patch(ctx, parts[0], false); err != nil {
			return err
		}
	default:
		if err := m.postMessage(ctx, parts[0], false); err != nil {
			return err
		}
	}
	for i, p := range parts[1:] {
		if err := m.part(ctx, i+2, p); err != nil {
			return fmt.Errorf("part %d of %d: %w", i+2, len(parts), err)
		}
	}
	m.settled = text
	return nil
}

// partKey names part n's stored reference: under "<kind>:<chat>", the
// turn's key with "#part<n>".
func (m *render) partKey(n int) (session, key string) {
	return m.r.kind + ":" + m.target.Chat, fmt.Sprintf("%s#part%d", m.turn, n)
}

// partUUID is part n's idempotency key, derived from the turn's key.
func (m *render) partUUID(n int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00part%d", m.r.kind, m.turn, n)))
	return hex.EncodeToString(sum[:])[:40]
}

// part makes part n (2, 3, …) of the answer show text: the part's message
// (this attempt's, or the stored reference's) is patched; without one it
// is posted with the part's uuid and its reference stored.
func (m *render) part(ctx context.Context, n int, text string) error {
	content := cardJSON(text, false)
	session, key := m.partKey(n)
	id := m.parts[n]
	if id == "" && m.r.Refs != nil {
		if ref, err := m.r.Refs.Reply(ctx, session, key); err == nil {
			id = ref
		}
	}
	if id != "" {
		if err := m.patchID(ctx, id, content); err != nil {
			return err
		}
	} else {
		var err error
		if id, err = m.reply(ctx, content, m.partUUID(n)); err != nil {
			return err
		}
		if m.r.Refs != nil {
			if err := m.r.Refs.SaveReply(ctx, session, key, id); err != nil {
				return fmt.Errorf("store the reference: %w", err)
			}
		}
	}
	if m.parts == nil {
		m.parts = map[int]string{}
	}
	m.parts[n] = id
	return nil
}

// answerElement is the element ID of the card's answer text.
const answerElement = "answer"

// maxCardText caps the text of a card (the platform caps a card at 30 KB);
// a longer answer goes on in further cards.
const maxCardText = 20000

// clip is what one card shows of text: all of it, or its first part (as
// Finish cuts it) with a mark saying more follows. Finish itself settles
// the card to the exact first part.
func clip(text string) string {
	if len(text) <= maxCardText {
		return text
	}
	return channels.SplitText(text, maxCardText-len(moreMark))[0] + moreMark
}

// moreMark ends a live preview cut at the card's size.
const moreMark = "\n\n…"

// cardJSON is a card (JSON 2.0) with one Markdown element.
func cardJSON(text string, streaming bool) string { return liveCardJSON(text, streaming, nil) }

// liveCardJSON is cardJSON with, when stop is set, the turn's Stop button
// under the text.
func liveCardJSON(text string, streaming bool, stop *buttonValue) string {
	text = clip(text)
	summary := text
	if r := []rune(summary); len(r) > 60 {
		summary = string(r[:60]) + "…"
	}
	if streaming {
		summary = "…"
	}
	elements := []any{map[string]any{"tag": "markdown", "element_id": answerElement, "content": text}}
	if stop != nil {
		elements = append(elements, stopButton(stop))
	}
	card := map[string]any{
		"schema": "2.0",
		"config": map[string]any{
			"streaming_mode": streaming,
			"update_multi":   true,
			"summary":        map[string]any{"content": summary},
		},
		"body": map[string]any{"elements": elements},
	}
	b, _ := json.Marshal(card) // a map of strings and bools: cannot fail
	return string(b)
}

func (m *render) createCard(ctx context.Context, text string, now time.Time) error {
	req := larkcardkit.NewCreateCardReqBuilder().
		Body(larkcardkit.NewCreateCardReqBodyBuilder().Type("card_json").Data(liveCardJSON(text, true, m.stop)).Build()).Build()
	resp, err := m.r.api.Cardkit.V1.Card.Create(ctx, req)
	if err := apiError("cardkit card create", err, resp); err != nil {
		return err
	}
	if resp.Data == nil || str(resp.Data.CardId) == "" {
		return errors.New("cardkit card create: no card_id")
	}
	m.mode, m.card, m.created = modeCard, str(resp.Data.CardId), now.UnixMilli()
	m.shown = text
	return nil
}

func (m *render) postCard(ctx context.Context) error {
	c, _ := json.Marshal(map[string]any{"type": "card", "data": map[string]string{"card_id": m.card}})
	id, err := m.reply(ctx, string(c), m.uuid)
	if err != nil {
		return err
	}
	m.msgID = id
	return nil
}

func (m *render) updateContent(ctx context.Context, text string, now time.Time) error {
	req := larkcardkit.NewContentCardElementReqBuilder().CardId(m.card).ElementId(answerElement).
		Body(larkcardkit.NewContentCardElementReqBodyBuilder().Content(clip(text)).Sequence(m.seq()).Build()).Build()
	resp, err := m.r.api.Cardkit.V1.CardElement.Content(ctx, req)
	if err := apiError("cardkit element content", err, resp); err != nil {
		// A card whose streaming was closed (the platform closes it after
		// a while) keeps its last preview; Finish still settles it.
		return err
	}
	m.shown, m.shownAt = text, now
	return nil
}

// settleCard replaces the card with the final text and closes streaming.
func (m *render) settleCard(ctx context.Context, text string) error {
	sum := sha256.Sum256([]byte(m.uuid + "\x00settle\x00" + text))
	req := larkcardkit.NewUpdateCardReqBuilder().CardId(m.card).
		Body(larkcardkit.NewUpdateCardReqBodyBuilder().
			Card(larkcardkit.NewCardBuilder().Type("card_json").Data(cardJSON(text, false)).Build()).
			Uuid(hex.EncodeToString(sum[:])[:40]).Sequence(m.seq()).Build()).Build()
	resp, err := m.r.api.Cardkit.V1.Card.Update(ctx, req)
	if err := apiError("cardkit card update", err, resp); err != nil {
		return err
	}
	m.shown = text
	return nil
}

// postMessage replies with a card message holding text (and, live, the
// Stop button).
func (m *render) postMessage(ctx context.Context, text string, live bool) error {
	var stop *buttonValue
	if live {
		stop = m.stop
	}
	id, err := m.reply(ctx, liveCardJSON(text, false, stop), m.uuid)
	if err != nil {
		return err
	}
	m.mode, m.msgID, m.shown, m.shownAt = modeMsg, id, text, time.Now()
	return nil
}

func (m *render) patch(ctx context.Context, text string, live bool) error {
	var stop *buttonValue
	if live {
		stop = m.stop
	}
	if err := m.patchID(ctx, m.msgID, liveCardJSON(text, false, stop)); err != nil {
		return err
	}
	m.shown = text
	return nil
}

// patchID replaces card message id's content.
func (m *render) patchID(ctx context.Context, id, content string) error {
	req := larkim.NewPatchMessageReqBuilder().MessageId(id).
		Body(larkim.NewPatchMessageReqBodyBuilder().Content(content).Build()).Build()
	resp, err := m.r.api.Im.Message.Patch(ctx, req)
	return apiError("im message patch", err, resp)
}

// reply posts an interactive message answering the target message, in its
// thread when the target names one, with idempotency key uuid.
func (m *render) reply(ctx context.Context, content, uuid string) (string, error) {
	body := larkim.NewReplyMessageReqBodyBuilder().MsgType("interactive").Content(content).Uuid(uuid)
	if m.target.Thread != "" {
		body.ReplyInThread(true)
	}
	req := larkim.NewReplyMessageReqBuilder().MessageId(m.target.Message).Body(body.Build()).Build()
	resp, err := m.r.api.Im.Message.Reply(ctx, req)
	if err := apiError("im message reply", err, resp); err != nil {
		return "", err
	}
	if resp.Data == nil || str(resp.Data.MessageId) == "" {
		return "", errors.New("im message reply: no message_id")
	}
	return str(resp.Data.MessageId), nil
}

// apiResult is what every SDK response has.
type apiResult interface{ Success() bool }

// apiError folds a call's transport error, API code and HTTP status into
// one error (nil on success).
func apiError[R apiResult](op string, err error, resp R) error {
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var zero R
	if any(resp) == any(zero) {
		return fmt.Errorf("%s: no response", op)
	}
	if !resp.Success() {
		if e, ok := any(resp).(error); ok {
			return fmt.Errorf("%s: %s", op, e.Error())
		}
		return fmt.Errorf("%s: failed", op)
	}
	return nil
}

// sdkLogger routes the SDK's log lines to slog.
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Debug(_ context.Context, args ...interface{}) { l.log.Debug(fmt.Sprint(args...)) }
func (l sdkLogger) Info(_ context.Context, args ...interface{})  { l.log.Info(fmt.Sprint(args...)) }
func (l sdkLogger) Warn(_ context.Context, args ...interface{})  { l.log.Warn(fmt.Sprint(args...)) }
func (l sdkLogger) Error(_ context.Context, args ...interface{}) { l.log.Error(fmt.Sprint(args...)) }

// Reactions of React (Feishu/Lark emoji types): OnIt once a message is
// taken, DONE once answered.
const (
	ReactionTaken    = "OnIt"
	ReactionAnswered = "DONE"
)

// React implements channels.Reactor: a reaction on the person's message
// (im/v1/messages/:message_id/reactions).
func (r *Replier) React(ctx context.Context, t wire.Target, stage string) error {
	if t.Message == "" {
		return fmt.Errorf("%s: react: no message to react to", r.kind)
	}
	emoji := ReactionTaken
	if stage == channels.ReactAnswered {
		emoji = ReactionAnswered
	}
	body := map[string]any{"reaction_type": map[string]string{"emoji_type": emoji}}
	resp, err := r.api.Post(ctx, "/open-apis/im/v1/messages/"+url.PathEscape(t.Message)+"/reactions", body, larkcore.AccessTokenTypeTenant)
	if err != nil {
		return fmt.Errorf("%s: react: %w", r.kind, err)
	}
	var out struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	}
	if err := json.Unmarshal(resp.RawBody, &out); err != nil || out.Code != 0 {
		return fmt.Errorf("%s: react: code %d: %s", r.kind, out.Code, out.Msg)
	}
	return nil
}
