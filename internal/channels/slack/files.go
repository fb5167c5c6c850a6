package slack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/slack-go/slack"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/wire"
)

// Defaults of FileLimits (channels.FileLimits).
const (
	DefaultMaxFileBytes   = channels.DefaultMaxFileBytes
	DefaultMaxImageBytes  = channels.DefaultMaxImageBytes
	DefaultMaxImagesBytes = channels.DefaultMaxImagesBytes
	DefaultFileTimeout    = channels.DefaultFileTimeout
)

// InboxDir is where files of Slack messages are saved, relative to the
// workspace: <InboxDir>/<file id>-<sanitized name>.
const InboxDir = "inbox/slack"

// FileLimits bound the files a message brings in and the files the agent
// sends; zero values take the defaults.
type FileLimits = channels.FileLimits

// Fetch implements channels.Fetcher. For each attachment it reads the
// file's current metadata (files.info), downloads it with the bot token
// from a Slack file host only (size-capped, timed out, redirects only to
// Slack hosts), and adds it to the prompt: a PNG, JPEG, GIF or WebP image
// within the image caps as vision input, any other file saved under
// dir/inbox/slack with a line naming its path. Every attachment is the
// message's own (primary) file, so one that fails fails the whole Fetch
// with an error naming it; the session workflow then runs the turn with the
// message's text and a note that its files could not be fetched. Errors a
// retry cannot fix are channels.Permanent.
func (r *Replier) Fetch(ctx context.Context, t wire.Target, p agent.Prompt, dir string) (agent.Prompt, error) {
	lim := r.Files.WithDefaults()
	in := channels.Intake{Limits: lim, Dir: dir, Inbox: InboxDir}
	for _, a := range t.Attachments {
		name := a.Name
		if name == "" {
			name = a.ID
		}
		fail := func(err error) (agent.Prompt, error) {
			return p, fmt.Errorf("slack: file %q (%s): %w", name, a.ID, err)
		}
		info, _, _, err := r.api.GetFileInfoContext(ctx, a.ID, 0, 0)
		if err != nil {
			var se slack.SlackErrorResponse
			if errors.As(err, &se) {
				err = channels.Permanent(err)
			}
			return fail(fmt.Errorf("files.info: %w", err))
		}
		if info.Name != "" {
			name = info.Name
		}
		if int64(info.Size) > lim.MaxFileBytes {
			return fail(channels.Permanent(fmt.Errorf("it is %s, over the %s limit (maxFileBytes)",
				tools.FormatSize(info.Size), tools.FormatSize(int(lim.MaxFileBytes)))))
		}
		link := info.URLPrivateDownload
		if link == "" {
			link = info.URLPrivate
		}
		if link == "" {
			return fail(channels.Permanent(fmt.Errorf("it has no download URL (mode %q)", info.Mode)))
		}
		data, err := r.download(ctx, link, lim)
		if err != nil {
			return fail(err)
		}
		if err := in.Add(a.ID, name, data); err != nil {
			return fail(err)
		}
	}
	return in.Prompt(p), nil
}

// download GETs link with the bot token. The link and every redirect must
// be on a Slack file host (FileHostAllowed); the body is capped at
// lim.MaxFileBytes and the whole download at lim.Timeout.
func (r *Replier) download(ctx context.Context, link string, lim FileLimits) ([]byte, error) {
	u, err := url.Parse(link)
	if err != nil {
		return nil, channels.Permanent(fmt.Errorf("download URL: %w", err))
	}
	if !r.FileHostAllowed(u) {
		return nil, channels.Permanent(fmt.Errorf("download refused: %s is not a Slack file host", hostOf(u)))
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
	if err != nil {
		return nil, channels.Permanent(fmt.Errorf("download URL: %w", err))
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	client := &http.Client{
		Transport: r.Transport,
		CheckRedirect: func(next *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return channels.Permanent(errors.New("download refused: too many redirects"))
			}
			if !r.FileHostAllowed(next.URL) {
				return channels.Permanent(fmt.Errorf("download refused: redirected to %s, not a Slack file host", hostOf(next.URL)))
			}
			return nil
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("download timed out after %s", lim.Timeout)
		}
		return nil, fmt.Errorf("download: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return nil, fmt.Errorf("download: HTTP %s", resp.Status)
	default:
		return nil, channels.Permanent(fmt.Errorf("download: HTTP %s", resp.Status))
	}
	// Without access, files.slack.com redirects to the sign-in page with
	// redir set to the file's path: that page is not the file.
	if final := resp.Request; final != nil && final.URL.Query().Get("redir") == u.Path && u.Path != "" {
		return nil, channels.Permanent(errors.New("download was redirected to the sign-in page: the bot token cannot read this file"))
	}
	if resp.ContentLength > lim.MaxFileBytes {
		return nil, channels.Permanent(fmt.Errorf("it is %s, over the %s limit (maxFileBytes)",
			tools.FormatSize(int(resp.ContentLength)), tools.FormatSize(int(lim.MaxFileBytes))))
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(resp.Body, lim.MaxFileBytes+1))
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("download timed out after %s", lim.Timeout)
		}
		return nil, fmt.Errorf("download: %w", err)
	}
	if n > lim.MaxFileBytes {
		return nil, channels.Permanent(fmt.Errorf("it is over the %s limit (maxFileBytes)", tools.FormatSize(int(lim.MaxFileBytes))))
	}
	return buf.Bytes(), nil
}

// FileHostAllowed reports whether the bot token may be sent to u: an https
// URL on slack.com, slack-edge.com or a subdomain (files.slack.com), or the
// scheme and host of the API URL override (SLACK_API_URL: tests, proxies).
func (r *Replier) FileHostAllowed(u *url.URL) bool {
	if u == nil || u.User != nil {
		return false
	}
	if u.Scheme == "https" {
		h := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
		for _, d := range []string{"slack.com", "slack-edge.com"} {
			if h == d || strings.HasSuffix(h, "."+d) {
				return true
			}
		}
	}
	return r.apiURL != nil && r.apiURL.Host != "" && u.Scheme == r.apiURL.Scheme && strings.EqualFold(u.Host, r.apiURL.Host)
}

func hostOf(u *url.URL) string {
	if u.Host == "" {
		return fmt.Sprintf("%q", u.String())
	}
	return u.Host
}

// SafeFileName is the name a Slack file is saved under
// (channels.SafeFileName): it cannot name a path outside InboxDir.
func SafeFileName(id, name string) string { return channels.SafeFileName(id, name) }
