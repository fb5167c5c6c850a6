package telegram

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/store"
)

// maxDocument is the most bytes sendDocument takes from a bot.
const maxDocument = 50 << 20

// Deliver implements delivery.Sender: the message is sent to the chat (a
// chat ID, or "@channel") as Telegram HTML, in as many messages as it
// needs, each one's message_id kept in the session store as it is sent so
// a retry sends only the rest; a file is sent with sendDocument.
//
// The Bot API has no idempotency key and no way to read a chat back, so a
// send whose outcome is unknown — the request went out and no answer came
// back (a timeout, a reset connection) — is not sent again: it is kept as
// unknown, and the send fails saying so rather than risk a second copy;
// so is one an attempt began (its mark is kept before the request goes
// out) and never finished (the worker died). A send refused before it went
// out (the connection could not be made) or answered with an error is
// retried.
func (r *Replier) Deliver(ctx context.Context, req delivery.Request) (string, error) {
	var chat any = req.Dest
	if id, err := strconv.ParseInt(req.Dest, 10, 64); err == nil {
		chat = id
	}
	unsure := req.Key + "#unknown"
	switch _, err := req.Refs.Reply(ctx, req.Session, unsure); {
	case err == nil:
		return "", delivery.Permanent(errors.New("telegram: an earlier attempt's outcome is unknown (the request went out and no answer came back); " +
			"the message may have arrived, so it is not sent again"))
	case !errors.Is(err, store.ErrNotFound):
		return "", err
	}
	send := func(partKey string, f func() (int64, error)) (string, error) {
		if ref, err := req.Refs.Reply(ctx, req.Session, partKey); err == nil {
			return ref, nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return "", err
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
		// Each attempt marks the send before making it and clears the
		// mark when it fails in a way that sent nothing: a mark left
		// without its clearing is an attempt that may have sent (its
		// worker died before keeping the message_id), so no more.
		try := 1
		for ; ; try++ {
			_, err := req.Refs.Reply(ctx, req.Session, partKey+"#try"+strconv.Itoa(try))
			if errors.Is(err, store.ErrNotFound) {
				break
			} else if err != nil {
				return "", err
			}
			switch _, err := req.Refs.Reply(ctx, req.Session, partKey+"#clear"+strconv.Itoa(try)); {
			case errors.Is(err, store.ErrNotFound):
				return "", delivery.Permanent(errors.New("telegram: an earlier attempt stopped after sending and before keeping what it sent; " +
					"the message may have arrived, so it is not sent again"))
			case err != nil:
				return "", err
			}
		}
		if err := req.Refs.SaveReply(context.WithoutCancel(ctx), req.Session, partKey+"#try"+strconv.Itoa(try), "sending"); err != nil {
			return "", err
		}
		id, err := f()
		if err != nil {
			serr := r.sendError(ctx, req, unsure, err)
			if nothingSent(err) {
				// Telegram refused it, or it never went out: a retry may.
				if cerr := req.Refs.SaveReply(context.WithoutCancel(ctx), req.Session, partKey+"#clear"+strconv.Itoa(try), "nothing sent"); cerr != nil {
					return "", errors.Join(serr, cerr)
				}
			}
			return "", serr
		}
		ref := strconv.FormatInt(id, 10)
		if err := req.Refs.SaveReply(context.WithoutCancel(ctx), req.Session, partKey, ref); err != nil {
			return "", err
		}
		return ref, nil
	}
	if f := req.File; f != nil {
		if len(f.Data) > maxDocument {
			return "", delivery.Permanent(fmt.Errorf("telegram: %s is larger than the 50 MB a bot may send", f.Name))
		}
		id, err := send(req.Key+"#doc", func() (int64, error) {
			var out sentMessage
			err := r.api.CallFile(ctx, "sendDocument", map[string]string{"chat_id": fmt.Sprint(chat)}, "document", f.Name, f.Data, &out)
			return out.MessageID, err
		})
		return req.Dest + "/" + id, err
	}
	var ids []string
	for i, p := range Split(HTML(req.Text), MaxText) {
		id, err := send(req.Key+"#part"+strconv.Itoa(i), func() (int64, error) { return r.post(ctx, chat, p) })
		if err != nil {
			return "", err
		}
		ids = append(ids, id)
	}
	return req.Dest + "/" + strings.Join(ids, ","), nil
}

// post sends one HTML message to chat (as plain text when Telegram cannot
// parse the HTML).
func (r *Replier) post(ctx context.Context, chat any, text string) (int64, error) {
	params := map[string]any{"chat_id": chat, "text": text, "parse_mode": "HTML", "link_preview_options": map[string]any{"is_disabled": true}}
	var out sentMessage
	err := r.api.Call(ctx, "sendMessage", params, &out)
	if badEntities(err) {
		delete(params, "parse_mode")
		params["text"] = Plain(text)
		err = r.api.Call(ctx, "sendMessage", params, &out)
	}
	if err == nil && out.MessageID == 0 {
		err = errors.New("telegram: sendMessage: no message_id")
	}
	return out.MessageID, err
}

// nothingSent reports whether a failed send certainly sent nothing:
// Telegram answered with an error, or the connection was never made.
func nothingSent(err error) bool {
	var te *Error
	var op *net.OpError
	return errors.As(err, &te) || (errors.As(err, &op) && op.Op == "dial")
}

// sendError classifies a failed send: Telegram's refusals a retry cannot
// change are permanent; a request that never went out is retried; one
// whose answer never came is kept as unknown and not sent again.
func (r *Replier) sendError(ctx context.Context, req delivery.Request, unsure string, err error) error {
	var te *Error
	var op *net.OpError
	switch {
	case errors.As(err, &te):
		if permanent(err) {
			return delivery.Permanent(err)
		}
		return err
	case errors.As(err, &op) && op.Op == "dial":
		return err
	}
	if serr := req.Refs.SaveReply(context.WithoutCancel(ctx), req.Session, unsure, "unknown"); serr != nil {
		return errors.Join(err, serr)
	}
	return delivery.Permanent(fmt.Errorf("%w (the outcome is unknown: the message may have arrived, so it is not sent again)", err))
}
