package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// DefaultAPIURL is the Bot API's base URL (TELEGRAM_API_URL overrides it).
const DefaultAPIURL = "https://api.telegram.org"

// API is a small typed Bot API client: JSON POSTs to
// <base>/bot<token>/<method> and file downloads from
// <base>/file/bot<token>/<path>. Its errors never contain the token.
type API struct {
	base  string
	token string
	http  *http.Client
}

// NewAPI returns a client of the Bot API at base ("" = DefaultAPIURL) for
// bot token.
func NewAPI(base, token string) *API {
	if base == "" {
		base = DefaultAPIURL
	}
	return &API{base: strings.TrimSuffix(base, "/"), token: token, http: &http.Client{Timeout: 70 * time.Second}}
}

// Error is an answer of the Bot API with ok=false.
type Error struct {
	Method      string
	Code        int
	Description string
	// RetryAfter is the wait a 429 asks for (parameters.retry_after).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	s := fmt.Sprintf("telegram: %s: %d %s", e.Method, e.Code, e.Description)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return s
}

// RetryAfter returns the wait a 429 answer asked for (0 when err is not
// one).
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) && e.Code == http.StatusTooManyRequests {
		if e.RetryAfter <= 0 {
			return time.Second
		}
		return e.RetryAfter
	}
	return 0
}

// notModified reports the answer to an edit that changes nothing.
func notModified(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == http.StatusBadRequest && strings.Contains(e.Description, "message is not modified")
}

// gone reports an edit refused because the message no longer exists or
// can no longer be edited.
func gone(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == http.StatusBadRequest &&
		(strings.Contains(e.Description, "message to edit not found") || strings.Contains(e.Description, "message can't be edited"))
}

// badEntities reports an answer refusing a message's HTML.
func badEntities(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == http.StatusBadRequest && strings.Contains(e.Description, "can't parse entities")
}

// permanent reports an answer a retry cannot change (4xx but 429).
func permanent(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code >= 400 && e.Code < 500 && e.Code != http.StatusTooManyRequests
}

type response struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  *struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
}

// Call invokes method with params (JSON) and decodes its result into out
// (nil: ignored).
func (a *API) Call(ctx context.Context, method string, params, out any) error {
	body, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("telegram: %s: %w", method, err)
	}
	return a.post(ctx, method, "application/json", bytes.NewReader(body), out)
}

// CallFile invokes method with params and one file (multipart/form-data),
// as sendDocument takes it, and decodes its result into out (nil: ignored).
func (a *API) CallFile(ctx context.Context, method string, params map[string]string, field, name string, data []byte, out any) error {
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if err := w.WriteField(k, params[k]); err != nil {
			return fmt.Errorf("telegram: %s: %w", method, err)
		}
	}
	fw, err := w.CreateFormFile(field, name)
	if err == nil {
		_, err = fw.Write(data)
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		return fmt.Errorf("telegram: %s: %w", method, err)
	}
	return a.post(ctx, method, w.FormDataContentType(), &body, out)
}

// post sends one request body to method and decodes its answer.
func (a *API) post(ctx context.Context, method, contentType string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/bot"+a.token+"/"+method, body)
	if err != nil {
		return fmt.Errorf("telegram: %s: bad API URL", method)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := a.http.Do(req) //nolint:gosec // the URL is the configured Bot API
	if err != nil {
		return fmt.Errorf("telegram: %s: %w", method, scrub(err))
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("telegram: %s: %w", method, scrub(err))
	}
	var r response
	if err := json.Unmarshal(raw, &r); err != nil {
		return &Error{Method: method, Code: resp.StatusCode, Description: "unreadable answer"}
	}
	if !r.OK {
		e := &Error{Method: method, Code: r.ErrorCode, Description: r.Description}
		if e.Code == 0 {
			e.Code = resp.StatusCode
		}
		if r.Parameters != nil && r.Parameters.RetryAfter > 0 {
			e.RetryAfter = time.Duration(r.Parameters.RetryAfter) * time.Second
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(r.Result, out); err != nil {
		return fmt.Errorf("telegram: %s: result: %w", method, err)
	}
	return nil
}

// scrub drops the request URL (which holds the token) from a transport
// error.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// errTooLarge answers a download over its cap.
var errTooLarge = errors.New("file over the size cap")

// Download fetches the file at path (getFile's file_path), failing with a
// wrapped errTooLarge past max bytes.
func (a *API) Download(ctx context.Context, path string, max int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/file/bot"+a.token+"/"+strings.TrimPrefix(path, "/"), nil)
	if err != nil {
		return nil, errors.New("telegram: download: bad file path")
	}
	resp, err := a.http.Do(req) //nolint:gosec // the URL is the configured Bot API
	if err != nil {
		return nil, fmt.Errorf("telegram: download: %w", scrub(err))
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, &Error{Method: "download", Code: resp.StatusCode, Description: http.StatusText(resp.StatusCode)}
	}
	if resp.ContentLength > max {
		return nil, errTooLarge
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("telegram: download: %w", scrub(err))
	}
	if int64(len(data)) > max {
		return nil, errTooLarge
	}
	return data, nil
}

// User is a Telegram user or bot.
type User struct {
	ID        int64  `json:"id"`
	IsBot     bool   `json:"is_bot,omitempty"`
	FirstName string `json:"first_name,omitempty"`
	LastName  string `json:"last_name,omitempty"`
	Username  string `json:"username,omitempty"`
}

// Chat is a private chat, group, supergroup or channel.
type Chat struct {
	ID    int64  `json:"id"`
	Type  string `json:"type"`
	Title string `json:"title,omitempty"`
}

// Entity is a special part of a message's text; Offset and Length count
// UTF-16 code units.
type Entity struct {
	Type   string `json:"type"`
	Offset int    `json:"offset"`
	Length int    `json:"length"`
	User   *User  `json:"user,omitempty"`
}

// PhotoSize is one size of a photo.
type PhotoSize struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// Document is a general file.
type Document struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	FileName     string `json:"file_name,omitempty"`
	MimeType     string `json:"mime_type,omitempty"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// Message is the part of a Bot API message the channel reads.
type Message struct {
	MessageID       int64       `json:"message_id"`
	MessageThreadID int64       `json:"message_thread_id,omitempty"`
	IsTopicMessage  bool        `json:"is_topic_message,omitempty"`
	From            *User       `json:"from,omitempty"`
	Chat            Chat        `json:"chat"`
	Date            int64       `json:"date"`
	Text            string      `json:"text,omitempty"`
	Entities        []Entity    `json:"entities,omitempty"`
	Caption         string      `json:"caption,omitempty"`
	CaptionEntities []Entity    `json:"caption_entities,omitempty"`
	ReplyToMessage  *Message    `json:"reply_to_message,omitempty"`
	Photo           []PhotoSize `json:"photo,omitempty"`
	Document        *Document   `json:"document,omitempty"`
}

// Update is one incoming update; the channel reads new and edited
// messages, and button presses on approval messages.
type Update struct {
	UpdateID int64    `json:"update_id"`
	Message  *Message `json:"message,omitempty"`
	// EditedMessage is a new version of a message (its new text).
	EditedMessage *Message `json:"edited_message,omitempty"`
	// CallbackQuery is a button pressed (an approval).
	CallbackQuery *CallbackQuery `json:"callback_query,omitempty"`
}

// File is getFile's answer.
type File struct {
	FileID   string `json:"file_id"`
	FileSize int64  `json:"file_size,omitempty"`
	FilePath string `json:"file_path,omitempty"`
}
