// Package faketelegram is a Telegram Bot API on loopback for tests: getMe,
// sendMessage, sendDocument, editMessageText, answerCallbackQuery, getUpdates (long poll over a queue of
// pushed updates), getFile, file downloads, setWebhook and deleteWebhook.
// It records every call, answers with real Bot API shapes (message_id per
// chat, "message is not modified", 429 with parameters.retry_after when
// throttled) and keeps each chat's messages so tests can read what users
// see. Tests point the channel at it with TELEGRAM_API_URL.
package faketelegram

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Bot identity answered by getMe.
const (
	BotID       = int64(7000000001)
	BotUsername = "fastagent_e2e_bot"
)

// Call is one API call the fake received.
type Call struct {
	// Method is the Bot API method ("sendMessage"), or "download".
	Method string
	// Token is the bot token of the URL.
	Token  string
	Params map[string]any
	At     time.Time
}

// Message is a message the bot posted.
type Message struct {
	ChatID    int64
	MessageID int64
	Text      string
	ParseMode string
	ReplyTo   int64
	Thread    int64
	Edits     int
	// Document is the file name of a sendDocument message, DocData its
	// bytes.
	Document string
	DocData  []byte
	// Buttons are the callback data of the message's inline keyboard, as
	// last sent or edited.
	Buttons []string
}

// buttons reads the callback data of an inline keyboard reply_markup; ok
// says p had one.
func buttons(p map[string]any) (out []string, ok bool) {
	rm, ok := p["reply_markup"].(map[string]any)
	if !ok {
		return nil, false
	}
	rows, _ := rm["inline_keyboard"].([]any)
	for _, row := range rows {
		cells, _ := row.([]any)
		for _, c := range cells {
			if b, ok := c.(map[string]any); ok {
				out = append(out, str(b["callback_data"]))
			}
		}
	}
	return out, true
}

// File is a file getFile and the download endpoint serve.
type File struct {
	Path string
	Data []byte
}

// Server is the fake Bot API.
type Server struct {
	*httptest.Server
	// Token is the bot token every call must carry (401 otherwise).
	Token string

	mu       sync.Mutex
	calls    []Call
	messages []*Message
	nextID   map[int64]int64
	files    map[string]File
	updates  []json.RawMessage
	updIDs   []int64
	notify   chan struct{}
	webhook  string
	// throttle answers the next n calls of a method with 429.
	throttle map[string]int
	retry    int
	fail     map[string]int
	// drop carries out the next n calls of a method and then closes the
	// connection without an answer.
	drop map[string]int
}

// DropAnswer makes the next n calls of method (sendMessage, sendDocument)
// take effect and then close the connection without answering: the
// client cannot know whether they did.
func (s *Server) DropAnswer(method string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop[method] = n
}

// dropped reports (and counts) a call whose answer is to be dropped.
func (s *Server) dropped(method string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drop[method] > 0 {
		s.drop[method]--
		return true
	}
	return false
}

// New starts a fake for bot token; it is closed by Close.
func New(token string) *Server {
	s := &Server{Token: token, nextID: map[int64]int64{}, files: map[string]File{}, notify: make(chan struct{}),
		throttle: map[string]int{}, fail: map[string]int{}, drop: map[string]int{}, retry: 1}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Throttle answers the next n calls of method with 429 Too Many Requests
// and parameters.retry_after = retryAfter seconds.
func (s *Server) Throttle(method string, n, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle[method] = n
	s.retry = retryAfter
}

// Fail answers the next n calls of method with 500.
func (s *Server) Fail(method string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[method] = n
}

// AddFile makes fileID resolvable by getFile and downloadable.
func (s *Server) AddFile(fileID string, f File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[fileID] = f
}

// Push queues an update (JSON with its update_id) for getUpdates.
func (s *Server) Push(update []byte) {
	var u struct {
		UpdateID int64 `json:"update_id"`
	}
	_ = json.Unmarshal(update, &u)
	s.mu.Lock()
	s.updates = append(s.updates, json.RawMessage(update))
	s.updIDs = append(s.updIDs, u.UpdateID)
	close(s.notify)
	s.notify = make(chan struct{})
	s.mu.Unlock()
}

// Calls returns the calls of method ("" = all) in order.
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Messages returns copies of the bot's messages in chat, in order.
func (s *Server) Messages(chat int64) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages {
		if m.ChatID == chat {
			out = append(out, *m)
		}
	}
	return out
}

// Webhook is the URL setWebhook set ("" after deleteWebhook).
func (s *Server) Webhook() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.webhook
}

type answer struct {
	OK          bool   `json:"ok"`
	Result      any    `json:"result,omitempty"`
	ErrorCode   int    `json:"error_code,omitempty"`
	Description string `json:"description,omitempty"`
	Parameters  any    `json:"parameters,omitempty"`
}

func write(w http.ResponseWriter, code int, a answer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(a)
}

func fail(w http.ResponseWriter, code int, desc string) {
	write(w, code, answer{ErrorCode: code, Description: desc})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	download := strings.HasPrefix(path, "file/")
	path = strings.TrimPrefix(path, "file/")
	if !strings.HasPrefix(path, "bot") {
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	token, rest, _ := strings.Cut(strings.TrimPrefix(path, "bot"), "/")
	call := Call{Method: rest, Token: token, Params: map[string]any{}, At: time.Now()}
	if download {
		call.Method = "download"
		call.Params["file_path"] = rest
	} else if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		if err := r.ParseMultipartForm(64 << 20); err == nil {
			for k := range r.MultipartForm.Value {
				call.Params[k] = r.FormValue(k)
			}
			for k, fhs := range r.MultipartForm.File {
				if f, err := fhs[0].Open(); err == nil {
					data, _ := io.ReadAll(f)
					_ = f.Close()
					call.Params[k] = fileParam{Name: fhs[0].Filename, Data: data}
				}
			}
		}
	} else if r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		if len(body) > 0 {
			dec := json.NewDecoder(strings.NewReader(string(body)))
			dec.UseNumber()
			_ = dec.Decode(&call.Params)
		}
	}
	s.mu.Lock()
	s.calls = append(s.calls, call)
	if token != s.Token {
		s.mu.Unlock()
		fail(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	if n := s.throttle[call.Method]; n > 0 {
		s.throttle[call.Method] = n - 1
		retry := s.retry
		s.mu.Unlock()
		write(w, http.StatusTooManyRequests, answer{ErrorCode: 429, Description: fmt.Sprintf("Too Many Requests: retry after %d", retry),
			Parameters: map[string]int{"retry_after": retry}})
		return
	}
	if n := s.fail[call.Method]; n > 0 {
		s.fail[call.Method] = n - 1
		s.mu.Unlock()
		fail(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	s.mu.Unlock()
	if download {
		s.download(w, rest)
		return
	}
	p := call.Params
	switch call.Method {
	case "getMe":
		write(w, http.StatusOK, answer{OK: true, Result: map[string]any{"id": BotID, "is_bot": true, "first_name": "E2E", "username": BotUsername}})
	case "setWebhook":
		s.mu.Lock()
		s.webhook = str(p["url"])
		s.mu.Unlock()
		write(w, http.StatusOK, answer{OK: true, Result: true})
	case "deleteWebhook":
		s.mu.Lock()
		s.webhook = ""
		s.mu.Unlock()
		write(w, http.StatusOK, answer{OK: true, Result: true})
	case "sendMessage":
		s.sendMessage(w, p)
	case "sendDocument":
		s.sendDocument(w, p)
	case "editMessageText":
		s.editMessageText(w, p)
	case "getFile":
		s.mu.Lock()
		f, ok := s.files[str(p["file_id"])]
		s.mu.Unlock()
		if !ok {
			fail(w, http.StatusBadRequest, "Bad Request: invalid file_id")
			return
		}
		write(w, http.StatusOK, answer{OK: true, Result: map[string]any{"file_id": str(p["file_id"]), "file_size": len(f.Data), "file_path": f.Path}})
	case "setMessageReaction":
		if num(p["chat_id"]) == 0 || num(p["message_id"]) == 0 {
			fail(w, http.StatusBadRequest, "Bad Request: message to react not found")
			return
		}
		write(w, http.StatusOK, answer{OK: true, Result: true})
	case "answerCallbackQuery":
		if str(p["callback_query_id"]) == "" {
			fail(w, http.StatusBadRequest, "Bad Request: query is too old and response timeout expired or query ID is invalid")
			return
		}
		write(w, http.StatusOK, answer{OK: true, Result: true})
	case "getUpdates":
		s.getUpdates(w, r, p)
	default:
		fail(w, http.StatusNotFound, "Not Found: method not found")
	}
}

func (s *Server) sendMessage(w http.ResponseWriter, p map[string]any) {
	chat := num(p["chat_id"])
	text := str(p["text"])
	if chat == 0 || strings.TrimSpace(text) == "" {
		fail(w, http.StatusBadRequest, "Bad Request: message text is empty")
		return
	}
	if n := len([]rune(text)); n > 4096 {
		fail(w, http.StatusBadRequest, "Bad Request: message is too long")
		return
	}
	if str(p["parse_mode"]) == "HTML" && !balanced(text) {
		fail(w, http.StatusBadRequest, "Bad Request: can't parse entities: unbalanced tags")
		return
	}
	s.mu.Lock()
	s.nextID[chat]++
	m := &Message{ChatID: chat, MessageID: 1000 + s.nextID[chat], Text: text, ParseMode: str(p["parse_mode"]), Thread: num(p["message_thread_id"])}
	if rp, ok := p["reply_parameters"].(map[string]any); ok {
		m.ReplyTo = num(rp["message_id"])
	}
	m.Buttons, _ = buttons(p)
	s.messages = append(s.messages, m)
	s.mu.Unlock()
	if s.dropped("sendMessage") {
		panic(http.ErrAbortHandler)
	}
	write(w, http.StatusOK, answer{OK: true, Result: map[string]any{"message_id": m.MessageID, "chat": map[string]any{"id": chat}, "date": time.Now().Unix(), "text": text}})
}

// fileParam is a file part of a multipart call.
type fileParam struct {
	Name string
	Data []byte
}

func (s *Server) sendDocument(w http.ResponseWriter, p map[string]any) {
	chat := num(p["chat_id"])
	doc, ok := p["document"].(fileParam)
	if chat == 0 || !ok || len(doc.Data) == 0 {
		fail(w, http.StatusBadRequest, "Bad Request: there is no document in the request")
		return
	}
	s.mu.Lock()
	s.nextID[chat]++
	m := &Message{ChatID: chat, MessageID: 1000 + s.nextID[chat], Document: doc.Name, DocData: doc.Data, Text: str(p["caption"])}
	s.messages = append(s.messages, m)
	s.mu.Unlock()
	if s.dropped("sendDocument") {
		panic(http.ErrAbortHandler)
	}
	write(w, http.StatusOK, answer{OK: true, Result: map[string]any{"message_id": m.MessageID, "chat": map[string]any{"id": chat},
		"date": time.Now().Unix(), "document": map[string]any{"file_name": doc.Name}}})
}

func (s *Server) editMessageText(w http.ResponseWriter, p map[string]any) {
	chat, id, text := num(p["chat_id"]), num(p["message_id"]), str(p["text"])
	if str(p["parse_mode"]) == "HTML" && !balanced(text) {
		fail(w, http.StatusBadRequest, "Bad Request: can't parse entities: unbalanced tags")
		return
	}
	if len([]rune(text)) > 4096 {
		fail(w, http.StatusBadRequest, "Bad Request: MESSAGE_TOO_LONG")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.messages {
		if m.ChatID == chat && m.MessageID == id {
			if m.Text == text && m.ParseMode == str(p["parse_mode"]) {
				fail(w, http.StatusBadRequest, "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message")
				return
			}
			m.Text, m.ParseMode = text, str(p["parse_mode"])
			if b, ok := buttons(p); ok {
				m.Buttons = b
			}
			m.Edits++
			write(w, http.StatusOK, answer{OK: true, Result: map[string]any{"message_id": id, "chat": map[string]any{"id": chat}, "text": text}})
			return
		}
	}
	fail(w, http.StatusBadRequest, "Bad Request: message to edit not found")
}

// getUpdates answers the queued updates from offset on, waiting up to
// timeout seconds for one.
func (s *Server) getUpdates(w http.ResponseWriter, r *http.Request, p map[string]any) {
	offset, timeout := num(p["offset"]), num(p["timeout"])
	deadline := time.After(time.Duration(timeout) * time.Second)
	for {
		s.mu.Lock()
		if s.webhook != "" {
			s.mu.Unlock()
			fail(w, http.StatusConflict, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first")
			return
		}
		var out []json.RawMessage
		for i, u := range s.updates {
			if s.updIDs[i] >= offset {
				out = append(out, u)
			}
		}
		// Confirmed updates are forgotten, as the platform does.
		kept, keptIDs := s.updates[:0], s.updIDs[:0]
		for i, u := range s.updates {
			if s.updIDs[i] >= offset {
				kept, keptIDs = append(kept, u), append(keptIDs, s.updIDs[i])
			}
		}
		s.updates, s.updIDs = kept, keptIDs
		wake := s.notify
		s.mu.Unlock()
		if len(out) > 0 || timeout <= 0 {
			if out == nil {
				out = []json.RawMessage{}
			}
			write(w, http.StatusOK, answer{OK: true, Result: out})
			return
		}
		select {
		case <-wake:
		case <-deadline:
			write(w, http.StatusOK, answer{OK: true, Result: []json.RawMessage{}})
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) download(w http.ResponseWriter, path string) {
	s.mu.Lock()
	var data []byte
	found := false
	for _, f := range s.files {
		if f.Path == path {
			data, found = f.Data, true
		}
	}
	s.mu.Unlock()
	if !found {
		http.NotFound(w, nil)
		return
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	_, _ = w.Write(data)
}

// balanced reports whether the tags of Telegram HTML text nest properly.
func balanced(text string) bool {
	var stack []string
	for i := 0; i < len(text); i++ {
		if text[i] != '<' {
			continue
		}
		j := strings.IndexByte(text[i:], '>')
		if j < 0 {
			return false
		}
		tag := text[i+1 : i+j]
		i += j
		if strings.HasPrefix(tag, "/") {
			if len(stack) == 0 || stack[len(stack)-1] != tag[1:] {
				return false
			}
			stack = stack[:len(stack)-1]
			continue
		}
		name, _, _ := strings.Cut(tag, " ")
		stack = append(stack, name)
	}
	return len(stack) == 0
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	}
	return ""
}

func num(v any) int64 {
	switch x := v.(type) {
	case json.Number:
		n, _ := x.Int64()
		return n
	case string:
		var n int64
		_, _ = fmt.Sscan(x, &n)
		return n
	}
	return 0
}
