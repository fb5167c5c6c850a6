package slack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/slack-go/slack"

	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
)

// listPages bounds the pages of conversations.list (1000 channels each)
// read to find a channel by name.
const listPages = 10

// Deliver implements delivery.Sender: a message is posted like a reply —
// marked with the send's identity in its metadata, and looked for in the
// channel's recent history before posting, so a post an earlier attempt
// made but could not record is continued, never posted again (this needs
// the channels:history, groups:history or im:history scope; without it
// the search is skipped with a warning). A file goes up with the external
// upload (files.getUploadURLExternal → upload → files.completeUploadExternal);
// the upload's file ID is kept before the upload, and a retry finds out
// with files.info whether that file was shared already.
//
// A destination is "#name" (found with conversations.list: channels:read,
// groups:read), a channel ID, or a user ID (a direct message, opened
// with conversations.open: im:write).
func (r *Replier) Deliver(ctx context.Context, req delivery.Request) (string, error) {
	ch, err := r.resolve(ctx, req.Dest)
	if err != nil {
		return "", err
	}
	if req.File != nil {
		return r.deliverFile(ctx, ch, req)
	}
	rd, err := r.Render(ctx, wire.Target{Chat: ":" + ch, Turn: req.Mark}, "")
	if err != nil {
		return "", delivery.Permanent(err)
	}
	if err := rd.Finish(ctx, req.Text); err != nil {
		return "", classify(err)
	}
	return ch + "/" + strings.TrimPrefix(rd.Ref(), refMessage), nil
}

// resolve turns a destination into a channel ID.
func (r *Replier) resolve(ctx context.Context, dest string) (string, error) {
	switch {
	case strings.HasPrefix(dest, "#"):
		name := strings.TrimPrefix(dest, "#")
		if id, ok := r.names.Load(name); ok {
			return id.(string), nil
		}
		cursor := ""
		for page := 0; page < listPages; page++ {
			chans, next, err := r.api.GetConversationsContext(ctx, &slack.GetConversationsParameters{
				Cursor: cursor, ExcludeArchived: true, Limit: 1000, Types: []string{"public_channel", "private_channel"}})
			if err != nil {
				return "", classify(fmt.Errorf("slack: find channel %s: conversations.list: %w", dest, err))
			}
			for _, c := range chans {
				if c.Name == name {
					r.names.Store(name, c.ID)
					return c.ID, nil
				}
			}
			if next == "" {
				break
			}
			cursor = next
		}
		return "", delivery.Permanent(fmt.Errorf("slack: no channel named %s that the app can see (invite the app to it, or name the channel by its ID)", dest))
	case strings.HasPrefix(dest, "U"), strings.HasPrefix(dest, "W"):
		c, _, _, err := r.api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{dest}, ReturnIM: true})
		if err != nil {
			return "", classify(fmt.Errorf("slack: open a direct message with %s: conversations.open: %w", dest, err))
		}
		return c.ID, nil
	}
	return dest, nil
}

// deliverFile shares the file in channel ch once.
func (r *Replier) deliverFile(ctx context.Context, ch string, req delivery.Request) (string, error) {
	f := req.File
	upKey := req.Key + "#upload"
	saved, err := req.Refs.Reply(ctx, req.Session, upKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		get, err := r.api.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: f.Name, FileSize: len(f.Data)})
		if err != nil {
			return "", classify(fmt.Errorf("slack: files.getUploadURLExternal: %w", err))
		}
		saved = get.FileID + " " + get.UploadURL
		if err := req.Refs.SaveReply(ctx, req.Session, upKey, saved); err != nil {
			return "", fmt.Errorf("slack: keep the upload of %s: %w", f.Name, err)
		}
		// A concurrent attempt may have kept another upload first: use
		// the one kept.
		if saved, err = req.Refs.Reply(ctx, req.Session, upKey); err != nil {
			return "", fmt.Errorf("slack: read the upload of %s: %w", f.Name, err)
		}
	case err != nil:
		return "", fmt.Errorf("slack: read the upload of %s: %w", f.Name, err)
	default:
		// An earlier attempt started this upload: was it shared?
		id, _, _ := strings.Cut(saved, " ")
		info, _, _, err := r.api.GetFileInfoContext(ctx, id, 0, 0)
		var se slack.SlackErrorResponse
		switch {
		case err == nil && sharedIn(info, ch):
			return ch + "/file:" + id, nil
		case err != nil && !errors.As(err, &se):
			return "", classify(fmt.Errorf("slack: files.info %s: %w", id, err))
		}
		// Not shared (or not known yet: an upload never completed): finish it.
	}
	id, url, ok := strings.Cut(saved, " ")
	if !ok || id == "" || url == "" {
		return "", delivery.Permanent(fmt.Errorf("slack: bad upload reference %q", saved))
	}
	if err := r.api.UploadToURL(ctx, slack.UploadToURLParameters{UploadURL: url, Reader: bytes.NewReader(f.Data), Filename: f.Name}); err != nil {
		return "", classify(fmt.Errorf("slack: upload %s: %w", f.Name, err))
	}
	if _, err := r.api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{
		Files: []slack.FileSummary{{ID: id, Title: f.Name}}, Channel: ch}); err != nil {
		return "", classify(fmt.Errorf("slack: files.completeUploadExternal: %w", err))
	}
	return ch + "/file:" + id, nil
}

// sharedIn reports whether f is shared in channel ch.
func sharedIn(f *slack.File, ch string) bool {
	if f == nil {
		return false
	}
	if slices.Contains(f.Channels, ch) || slices.Contains(f.Groups, ch) || slices.Contains(f.IMs, ch) {
		return true
	}
	_, pub := f.Shares.Public[ch]
	_, priv := f.Shares.Private[ch]
	return pub || priv
}

// permanentErrors are Slack's answers a retry cannot fix.
var permanentErrors = []string{"channel_not_found", "not_in_channel", "is_archived", "invalid_auth", "not_authed",
	"account_inactive", "token_revoked", "missing_scope", "no_permission", "user_not_found", "cannot_dm_bot",
	"msg_too_long", "no_text", "invalid_blocks", "restricted_action", "ekm_access_denied", "file_uploads_disabled"}

// classify marks Slack's answers a retry cannot fix as permanent.
func classify(err error) error {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && slices.Contains(permanentErrors, se.Err) {
		return delivery.Permanent(err)
	}
	return err
}
