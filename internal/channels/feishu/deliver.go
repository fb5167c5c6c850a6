package feishu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/delivery"
)

// Deliver implements delivery.Sender: the message is posted to the chat
// ("oc_…") or the person ("ou_…") as card messages (one per card's worth
// of text), each created with a uuid derived from the send's identity —
// the platform answers a repeated create with the message it made, for an
// hour — and a file is uploaded (im/v1/files) and posted as a file
// message the same way. A retry later than that hour could post again;
// the session store's reference of a finished send stops any retry first.
func (r *Replier) Deliver(ctx context.Context, req delivery.Request) (string, error) {
	idType := "chat_id"
	if strings.HasPrefix(req.Dest, "ou_") {
		idType = "open_id"
	}
	if f := req.File; f != nil {
		key, err := r.uploadFile(ctx, f)
		if err != nil {
			return "", err
		}
		content, _ := json.Marshal(map[string]string{"file_key": key})
		id, err := r.create(ctx, idType, req.Dest, "file", string(content), req.Mark+"-f")
		if err != nil {
			return "", err
		}
		return req.Dest + "/" + id, nil
	}
	var ids []string
	for i, part := range channels.SplitText(req.Text, maxCardText) {
		id, err := r.create(ctx, idType, req.Dest, "interactive", cardJSON(part, false), req.Mark+"-"+strconv.Itoa(i))
		if err != nil {
			return "", fmt.Errorf("part %d: %w", i+1, err)
		}
		ids = append(ids, id)
	}
	return req.Dest + "/" + strings.Join(ids, ","), nil
}

// create posts one message with idempotency key uuid.
func (r *Replier) create(ctx context.Context, idType, dest, msgType, content, uuid string) (string, error) {
	req := larkim.NewCreateMessageReqBuilder().ReceiveIdType(idType).
		Body(larkim.NewCreateMessageReqBodyBuilder().ReceiveId(dest).MsgType(msgType).Content(content).Uuid(uuid).Build()).Build()
	resp, err := r.api.Im.Message.Create(ctx, req)
	if err := apiError("im message create", err, resp); err != nil {
		return "", deliveryError(err, resp != nil && refusal(resp.Code))
	}
	if resp.Data == nil || str(resp.Data.MessageId) == "" {
		return "", errors.New("im message create: no message_id")
	}
	return str(resp.Data.MessageId), nil
}

// uploadFile uploads f as a "stream" file and returns its file_key.
func (r *Replier) uploadFile(ctx context.Context, f *delivery.File) (string, error) {
	req := larkim.NewCreateFileReqBuilder().Body(larkim.NewCreateFileReqBodyBuilder().
		FileType("stream").FileName(f.Name).File(bytes.NewReader(f.Data)).Build()).Build()
	resp, err := r.api.Im.File.Create(ctx, req)
	if err := apiError("im file create", err, resp); err != nil {
		return "", deliveryError(err, resp != nil && refusal(resp.Code))
	}
	if resp.Data == nil || str(resp.Data.FileKey) == "" {
		return "", errors.New("im file create: no file_key")
	}
	return str(resp.Data.FileKey), nil
}

// refusal reports whether an API code is a refusal a retry cannot fix:
// any code but the rate limits'.
func refusal(code int) bool {
	switch code {
	case 0, 99991400, 230020, 11232:
		return false
	}
	return true
}

// deliveryError marks a refusal by the API (a code, such as a chat the
// bot is not in or a file too large) as permanent; a transport failure
// or a server error is retried.
func deliveryError(err error, refused bool) error {
	if refused {
		return delivery.Permanent(err)
	}
	return err
}
