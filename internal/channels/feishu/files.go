package feishu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	lark "github.com/larksuite/oapi-sdk-go/v3"
	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/wire"
)

// MimeParent marks the attachment that stands for the message a
// reply-summon answers: its ID is the parent's message_id. Fetch loads the
// parent's content and files as the turn's primary input.
const MimeParent = "application/x-feishu-parent"

// inboxDir is where files of a profile's messages are saved, relative to
// the workspace: inbox/<kind>/<file key>-<sanitized name>.
func inboxDir(kind string) string { return "inbox/" + kind }

// Fetch implements channels.Fetcher. Each attachment of the message is
// downloaded through the message-resource API (type=image for images,
// file otherwise; size-capped, timed out) and given to the model by the
// shared channels.Intake policy: images as vision input within their caps,
// other files saved under dir/inbox/<kind>. The MimeParent attachment of a
// reply-summon loads the parent message: its text leads the prompt and its
// files are fetched too. Every attachment is primary input, so one that
// fails fails Fetch; errors a retry cannot fix are channels.Permanent.
func (r *Replier) Fetch(ctx context.Context, t wire.Target, p agent.Prompt, dir string) (agent.Prompt, error) {
	lim := r.Files.WithDefaults()
	in := channels.Intake{Limits: lim, Dir: dir, Inbox: inboxDir(r.kind)}
	parent := ""
	for _, a := range t.Attachments {
		if a.Mime == MimeParent {
			text, files, err := r.parent(ctx, a.ID)
			if err != nil {
				return p, err
			}
			parent = text
			for _, f := range files {
				if err := r.fetchOne(ctx, a.ID, f, &in, lim); err != nil {
					return p, err
				}
			}
			continue
		}
		if err := r.fetchOne(ctx, t.Message, a, &in, lim); err != nil {
			return p, err
		}
	}
	out := in.Prompt(p)
	if parent != "" {
		head := "The message this replies to (primary input):\n" + parent
		if strings.TrimSpace(out.Text) != "" {
			head += "\n\nThe reply addressed to you:\n" + out.Text
		}
		out.Text = head
	}
	return out, nil
}

// fetchOne downloads attachment a of message msg into in.
func (r *Replier) fetchOne(ctx context.Context, msg string, a wire.Attachment, in *channels.Intake, lim channels.FileLimits) error {
	name := a.Name
	if name == "" {
		name = a.ID
	}
	typ := "file"
	if a.Mime == MimeImage {
		typ = "image"
	}
	data, got, err := r.resource(ctx, msg, a.ID, typ, lim)
	if err != nil {
		return fmt.Errorf("%s: %s %q (%s): %w", r.kind, typ, name, a.ID, err)
	}
	if typ == "file" && got != "" {
		name = got
	}
	if err := in.Add(a.ID, name, data); err != nil {
		return fmt.Errorf("%s: %s %q (%s): %w", r.kind, typ, name, a.ID, err)
	}
	return nil
}

// resource downloads one file of a message with the message-resource API
// and returns its bytes and the file name the platform gave.
func (r *Replier) resource(ctx context.Context, msg, key, typ string, lim channels.FileLimits) ([]byte, string, error) {
	if msg == "" || key == "" {
		return nil, "", channels.Permanent(errors.New("no message_id or file key"))
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	req := larkim.NewGetMessageResourceReqBuilder().MessageId(msg).FileKey(key).Type(typ).Build()
	resp, err := r.filesAPI().Im.MessageResource.Get(ctx, req)
	switch {
	case errors.Is(err, errTooLarge):
		return nil, "", channels.Permanent(fmt.Errorf("it is over the %s limit (maxFileBytes)", tools.FormatSize(int(lim.MaxFileBytes))))
	case err != nil && ctx.Err() == context.DeadlineExceeded:
		return nil, "", fmt.Errorf("download timed out after %s", lim.Timeout)
	case err != nil:
		return nil, "", fmt.Errorf("download: %w", err)
	case resp == nil:
		return nil, "", errors.New("download: no response")
	case !resp.Success() || resp.StatusCode != http.StatusOK:
		err := fmt.Errorf("download: HTTP %d, code %d: %s", resp.StatusCode, resp.Code, resp.Msg)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return nil, "", err
		}
		return nil, "", channels.Permanent(err)
	}
	data, err := io.ReadAll(resp.File)
	if err != nil {
		return nil, "", fmt.Errorf("download: %w", err)
	}
	return data, resp.FileName, nil
}

// parent loads the message a reply-summon answers: its text (who sent
// it, then its content) and its files.
func (r *Replier) parent(ctx context.Context, id string) (string, []wire.Attachment, error) {
	resp, err := r.api.Im.Message.Get(ctx, larkim.NewGetMessageReqBuilder().MessageId(id).Build())
	if err := apiError("im message get", err, resp); err != nil {
		if resp != nil && resp.ApiResp != nil && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
			err = channels.Permanent(err)
		}
		return "", nil, fmt.Errorf("%s: replied-to message %s: %w", r.kind, id, err)
	}
	if resp.Data == nil || len(resp.Data.Items) == 0 || resp.Data.Items[0] == nil {
		return "", nil, channels.Permanent(fmt.Errorf("%s: replied-to message %s: not found", r.kind, id))
	}
	m := resp.Data.Items[0]
	if m.Deleted != nil && *m.Deleted {
		return "(the replied-to message was recalled)", nil, nil
	}
	var mentions []*larkim.MentionEvent
	for _, mn := range m.Mentions {
		if mn == nil {
			continue
		}
		mentions = append(mentions, &larkim.MentionEvent{Key: mn.Key, Name: mn.Name, Id: &larkim.UserId{OpenId: mn.Id}})
	}
	raw := ""
	if m.Body != nil {
		raw = str(m.Body.Content)
	}
	typ := str(m.MsgType)
	text, files := content(typ, raw, mentions, "")
	if typ == "interactive" {
		text = cardText(raw)
	}
	if text == "" && len(files) == 0 {
		text = "(a " + typ + " message)"
	}
	if m.Sender != nil && str(m.Sender.SenderType) == "app" {
		text = "[sent by an app]\n" + text
	}
	return text, files, nil
}

// cardText collects the visible strings of a card's JSON (a reply card of
// the bot, say): every "content" and "text" string, in order.
func cardText(raw string) string {
	var v any
	if json.Unmarshal([]byte(raw), &v) != nil {
		return ""
	}
	var parts []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range []string{"title", "text", "content"} {
				if s, ok := x[k].(string); ok && strings.TrimSpace(s) != "" {
					parts = append(parts, strings.TrimSpace(s))
				}
			}
			for k, c := range x {
				if k == "title" || k == "text" || k == "content" {
					if _, isStr := c.(string); isStr {
						continue
					}
				}
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(v)
	return strings.Join(parts, "\n")
}

// errTooLarge is returned by capClient when a response is over its cap.
var errTooLarge = errors.New("response over the size cap")

// capClient is the HTTP client of file downloads: the SDK reads a
// response whole into memory, so the cap is enforced while it reads.
type capClient struct {
	c   *http.Client
	max int64
}

// Do implements larkcore.HttpClient.
func (c capClient) Do(req *http.Request) (*http.Response, error) {
	// The request is the SDK's own, to the configured open-platform base URL.
	resp, err := c.c.Do(req) //nolint:gosec // G704: the URL is the configured Feishu/Lark API, not user input
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > c.max {
		_ = resp.Body.Close()
		return nil, errTooLarge
	}
	resp.Body = &capBody{rc: resp.Body, left: c.max}
	return resp, nil
}

// capBody fails a read past its cap.
type capBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *capBody) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, errTooLarge
	}
	return n, err
}

func (b *capBody) Close() error { return b.rc.Close() }

// newFilesClient is the open-API client of downloads for app appID: no
// whole-request timeout (Fetch bounds each download), responses capped at
// max bytes.
func newFilesClient(p Profile, appID, appSecret string, max int64, log larkcore.Logger) *lark.Client {
	return lark.NewClient(appID, appSecret,
		lark.WithOpenBaseUrl(p.BaseURL),
		lark.WithHttpClient(capClient{c: &http.Client{}, max: max}),
		lark.WithLogger(log),
		lark.WithLogLevel(larkcore.LogLevelWarn))
}
