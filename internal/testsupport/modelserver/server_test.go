package modelserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// post sends a chat completions request and returns the response.
func post(t *testing.T, ctx context.Context, s *Server, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	return resp
}

func streamBody(user string) string {
	return fmt.Sprintf(`{"model":"m","stream":true,"messages":[{"role":"user","content":%q}]}`, user)
}

// events reads SSE data payloads until EOF; it returns them and the read error.
func events(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "data: ") {
			out = append(out, strings.TrimPrefix(line, "data: "))
		} else if line != "" {
			return out, fmt.Errorf("unexpected line %q", line)
		}
	}
	return out, sc.Err()
}

type testChunk struct {
	Choices []struct {
		Delta struct {
			Role             string  `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent string  `json:"reasoning_content"`
			ToolCalls        []struct {
				Index    *int   `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string  `json:"name"`
					Arguments *string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func TestStreamShape(t *testing.T) {
	t.Parallel()
	s := New()
	defer s.Close()
	s.Enqueue(Reply{
		Thinking:  []string{"hmm"},
		Text:      []string{"Hel", "lo"},
		ToolCalls: []ToolCall{{ID: "call_1", Name: "read", Args: `{"path":"a.txt"}`}},
		Usage:     &Usage{PromptTokens: 7, CompletionTokens: 5},
	})
	var hookSeq int
	var hookMu sync.Mutex
	s.OnFirstDelta(func(r Request, at time.Time) {
		hookMu.Lock()
		defer hookMu.Unlock()
		hookSeq = r.Seq
	})
	resp := post(t, context.Background(), s, streamBody("hi"))
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs, err := events(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("last event %q, want [DONE]", evs[len(evs)-1])
	}
	var chunks []testChunk
	for _, e := range evs[:len(evs)-1] {
		var c testChunk
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("chunk %s: %v", e, err)
		}
		chunks = append(chunks, c)
	}
	// role, thinking, 2 text, tool head, args pieces..., finish, usage
	if got := chunks[0].Choices[0].Delta.Role; got != "assistant" {
		t.Errorf("first chunk role %q", got)
	}
	if got := chunks[1].Choices[0].Delta.ReasoningContent; got != "hmm" {
		t.Errorf("thinking chunk %q", got)
	}
	if a, b := *chunks[2].Choices[0].Delta.Content, *chunks[3].Choices[0].Delta.Content; a+b != "Hello" || a != "Hel" {
		t.Errorf("text chunks %q %q", a, b)
	}
	head := chunks[4].Choices[0].Delta.ToolCalls
	if len(head) != 1 || *head[0].Index != 0 || head[0].ID != "call_1" || head[0].Type != "function" ||
		head[0].Function.Name != "read" || head[0].Function.Arguments == nil || *head[0].Function.Arguments != "" {
		t.Fatalf("tool call head chunk %s", evs[4])
	}
	var args string
	pieces := 0
	i := 5
	for ; len(chunks[i].Choices) > 0 && len(chunks[i].Choices[0].Delta.ToolCalls) > 0; i++ {
		tc := chunks[i].Choices[0].Delta.ToolCalls[0]
		if tc.ID != "" || tc.Type != "" || tc.Function.Name != "" || *tc.Index != 0 {
			t.Errorf("argument chunk carries more than index and arguments: %s", evs[i])
		}
		args += *tc.Function.Arguments
		pieces++
	}
	if args != `{"path":"a.txt"}` || pieces < 2 {
		t.Errorf("arguments %q in %d pieces, want the scripted ones in 2+", args, pieces)
	}
	if fr := chunks[i].Choices[0].FinishReason; fr == nil || *fr != "tool_calls" {
		t.Errorf("finish chunk %s", evs[i])
	}
	u := chunks[i+1]
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.PromptTokens != 7 || u.Usage.CompletionTokens != 5 || u.Usage.TotalTokens != 12 {
		t.Errorf("usage chunk %s", evs[i+1])
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].FirstDelta.IsZero() || reqs[0].FirstDelta.Before(reqs[0].Received) || reqs[0].Aborted {
		t.Errorf("recorded %+v", reqs)
	}
	hookMu.Lock()
	if hookSeq != 1 {
		t.Errorf("OnFirstDelta hook saw request %d, want 1", hookSeq)
	}
	hookMu.Unlock()
}

func TestFinishReasons(t *testing.T) {
	t.Parallel()
	s := New()
	defer s.Close()
	cases := []struct {
		reply Reply
		want  string // "" = no finish_reason at all
	}{
		{Reply{Text: []string{"a"}}, "stop"},
		{Reply{ToolCalls: []ToolCall{{ID: "c", Name: "n"}}}, "tool_calls"},
		{Reply{Text: []string{"a"}, FinishReason: "length"}, "length"},
		{Reply{Text: []string{"a"}, FinishReason: NoFinish}, ""},
	}
	for _, c := range cases {
		s.Enqueue(c.reply)
		resp := post(t, context.Background(), s, streamBody("x"))
		evs, err := events(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, e := range evs {
			var ch testChunk
			if json.Unmarshal([]byte(e), &ch) == nil && len(ch.Choices) > 0 && ch.Choices[0].FinishReason != nil {
				got = *ch.Choices[0].FinishReason
			}
		}
		if got != c.want || evs[len(evs)-1] != "[DONE]" {
			t.Errorf("finish reason %q (last event %q), want %q", got, evs[len(evs)-1], c.want)
		}
	}
}

func TestNonStreaming(t *testing.T) {
	t.Parallel()
	s := New()
	defer s.Close()
	s.Enqueue(Reply{Text: []string{"a", "b"}, Thinking: []string{"t"}, ToolCalls: []ToolCall{{ID: "c1", Name: "f", Args: `{"x":1}`}}})
	resp := post(t, context.Background(), s, `{"model":"m","messages":[{"role":"user","content":"q"}]}`)
	defer resp.Body.Close()
	var got struct {
		Choices []struct {
			Message struct {
				Content          string `json:"content"`
				ReasoningContent string `json:"reasoning_content"`
				ToolCalls        []struct {
					ID       string `json:"id"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	m := got.Choices[0].Message
	if m.Content != "ab" || m.ReasoningContent != "t" || len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != "c1" ||
		m.ToolCalls[0].Function.Arguments != `{"x":1}` || got.Choices[0].FinishReason != "tool_calls" || got.Usage.TotalTokens == 0 {
		t.Errorf("reply %+v", got)
	}
}

func TestErrorReply(t *testing.T) {
	t.Parallel()
	s := New()
	defer s.Close()
	s.Enqueue(Reply{Status: 429, RetryAfter: "2", Message: "slow down"}, Reply{Status: 500})
	for _, want := range []struct {
		status     int
		retryAfter string
		msg, typ   string
	}{{429, "2", "slow down", "rate_limit_error"}, {500, "", "Internal Server Error", "server_error"}} {
		resp := post(t, context.Background(), s, streamBody("x"))
		var body struct {
			Error struct{ Message, Type string } `json:"error"`
		}
		err := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want.status || resp.Header.Get("Retry-After") != want.retryAfter ||
			body.Error.Message != want.msg || body.Error.Type != want.typ {
			t.Errorf("got %d %q %+v, want %+v", resp.StatusCode, resp.Header.Get("Retry-After"), body.Error, want)
		}
	}
}

func TestScriptOrder(t *testing.T) {
	t.Parallel()
	s := New()
	defer s.Close()
	s.Enqueue(Reply{Text: []string{"shared1"}}, Reply{Text: []string{"shared2"}})
	s.EnqueueFor("conv-A", Reply{Text: []string{"A1"}}, Reply{Text: []string{"A2"}})
	s.EnqueueFor("conv-B", Reply{Text: []string{"B1"}})
	s.Handle(func(r Request) Reply { return Reply{Text: []string{"fallback:" + r.LastUserText()}} })
	text := func(user string) string {
		resp := post(t, context.Background(), s, streamBody(user))
		defer resp.Body.Close()
		evs, err := events(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var out string
		for _, e := range evs {
			var ch testChunk
			if json.Unmarshal([]byte(e), &ch) == nil && len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != nil {
				out += *ch.Choices[0].Delta.Content
			}
		}
		return out
	}
	steps := []struct{ user, want string }{
		{"hello conv-B there", "B1"},
		{"other", "shared1"},
		{"conv-A", "A1"},
		{"conv-B again", "shared2"}, // B's queue is empty: shared queue next
		{"conv-A", "A2"},
		{"conv-A", "fallback:conv-A"},
	}
	for _, st := range steps {
		if got := text(st.user); got != st.want {
			t.Errorf("user %q: reply %q, want %q", st.user, got, st.want)
		}
	}
	if s.Count() != len(steps) || s.Pending() != 0 {
		t.Errorf("Count %d Pending %d", s.Count(), s.Pending())
	}
	s.Handle(nil)
	if got := text("z"); got != "ok" {
		t.Errorf("default fallback replied %q, want ok", got)
	}
}

func TestKeyedConcurrent(t *testing.T) {
	t.Parallel()
	s := New()
	defer s.Close()
	const n = 20
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("[conv %d]", i)
		s.EnqueueFor(key, Reply{Text: []string{key}, ChunkDelay: time.Millisecond})
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("[conv %d]", i)
			resp := post(t, context.Background(), s, streamBody("please answer "+key))
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if want := fmt.Sprintf(`"content":%q`, key); !bytes.Contains(b, []byte(want)) {
				errs <- fmt.Errorf("%s got %s", key, b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDisconnect(t *testing.T) {
	t.Parallel()
	s := New()
	defer s.Close()
	s.Enqueue(Reply{Text: []string{"a", "b", "c"}, DisconnectAfter: 2})
	resp := post(t, context.Background(), s, streamBody("x"))
	defer resp.Body.Close()
	evs, err := events(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read error %v, want unexpected EOF", err)
	}
	if len(evs) != 3 { // role + 2 text
		t.Errorf("got %d events before the cut, want 3: %q", len(evs), evs)
	}
	if s.Aborted() != 0 {
		t.Errorf("server-side disconnect counted as client abort")
	}
}

func TestHangAndAbort(t *testing.T) {
	t.Parallel()
	s := New()
	defer s.Close()
	s.Enqueue(Reply{Text: []string{"partial"}, Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, s, streamBody("x"))
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 2; i++ { // role chunk and the text chunk arrive
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		_, _ = br.ReadString('\n')
	}
	if s.Aborted() != 0 {
		t.Fatal("aborted before the client left")
	}
	cancel()
	resp.Body.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if err := s.WaitAborted(wctx); err != nil {
		t.Fatal(err)
	}
	if s.Aborted() != 1 || !s.Requests()[0].Aborted {
		t.Errorf("Aborted %d, request %+v", s.Aborted(), s.Requests()[0])
	}
}

func TestCloseEndsHang(t *testing.T) {
	t.Parallel()
	s := New()
	s.Enqueue(Reply{Hang: true})
	started := make(chan struct{})
	go func() {
		resp, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(streamBody("x")))
		close(started)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-started
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked on a hanging reply")
	}
}

func TestRequestDecoding(t *testing.T) {
	t.Parallel()
	s := New()
	defer s.Close()
	body := `{"model":"gpt-x","stream":true,"max_completion_tokens":99,
	 "messages":[
	  {"role":"system","content":"sys"},
	  {"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAA="}}]},
	  {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]},
	  {"role":"tool","tool_call_id":"c1","content":"a.txt"},
	  {"role":"user","content":"next"}],
	 "tools":[{"type":"function","function":{"name":"ls","description":"list","parameters":{"type":"object"}}}]}`
	resp := post(t, context.Background(), s, body)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r := s.Requests()[0]
	if r.Model != "gpt-x" || !r.Stream || r.MaxTokens != 99 || r.LastUserText() != "next" ||
		strings.Join(r.Roles(), ",") != "system,user,assistant,tool,user" {
		t.Fatalf("request %+v", r)
	}
	if m := r.Messages[1]; m.Content != "look" || len(m.Parts) != 2 || m.Parts[1].ImageURL != "data:image/png;base64,AAA=" {
		t.Errorf("user parts %+v", m)
	}
	if m := r.Messages[2]; len(m.ToolCalls) != 1 || m.ToolCalls[0] != (ToolCall{ID: "c1", Name: "ls", Args: "{}"}) {
		t.Errorf("assistant %+v", m)
	}
	if m := r.Messages[3]; m.ToolCallID != "c1" || m.Content != "a.txt" {
		t.Errorf("tool %+v", m)
	}
	if len(r.Tools) != 1 || r.Tools[0].Name != "ls" || r.Tools[0].Description != "list" || string(r.Tools[0].Parameters) != `{"type":"object"}` {
		t.Errorf("tools %+v", r.Tools)
	}
	if !json.Valid(r.Raw) {
		t.Errorf("raw body not kept")
	}
}

func TestListenAndServe(t *testing.T) {
	t.Parallel()
	s := NewUnstarted()
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe("127.0.0.1:0") }()
	wait.For(t, 5*time.Second, "ListenAndServe to listen", func() bool { return s.URL() != "" })
	if !strings.HasSuffix(s.URL(), "/v1") {
		t.Fatalf("URL %q", s.URL())
	}
	resp := post(t, context.Background(), s, streamBody("x"))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.Close()
	if err := <-errc; err != nil {
		t.Fatalf("ListenAndServe returned %v after Close", err)
	}
	if s.Count() != 1 {
		t.Errorf("Count %d", s.Count())
	}
}

func TestHold(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			s := New()
			defer s.Close()
			hold := make(chan struct{})
			s.Enqueue(Reply{Text: []string{"held ", "answer"}, Hold: hold})
			body := streamBody("x")
			if !stream {
				body = `{"model":"m","messages":[{"role":"user","content":"x"}]}`
			}
			got := make(chan string, 1)
			go func() {
				resp, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					got <- "error: " + err.Error()
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got <- string(b)
			}()
			select {
			case b := <-got:
				t.Fatalf("the reply was not held: %q", b)
			case <-time.After(300 * time.Millisecond):
			}
			close(hold)
			select {
			case b := <-got:
				if !strings.Contains(b, "answer") {
					t.Errorf("released reply = %q, want the scripted text", b)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the reply did not finish after Hold was closed")
			}
			if s.Aborted() != 0 {
				t.Errorf("a held, then released reply counted as aborted")
			}
		})
	}
}

// TestFirstDelayAndDone checks that FirstDelay holds back the first content
// chunk (and only it) and that Done records when the stream ended.
func TestFirstDelayAndDone(t *testing.T) {
	t.Parallel()
	s := New()
	defer s.Close()
	const first = 150 * time.Millisecond
	s.Enqueue(Reply{Text: []string{"a", "b", "c"}, FirstDelay: first})
	resp := post(t, context.Background(), s, streamBody("x"))
	if _, err := events(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests recorded, want 1", len(reqs))
	}
	r := reqs[0]
	if got := r.FirstDelta.Sub(r.Received); got < first {
		t.Errorf("first delta after %s, want at least the FirstDelay %s", got, first)
	}
	if r.Done.IsZero() || r.Done.Before(r.FirstDelta) {
		t.Errorf("Done = %v, want a time after the first delta %v", r.Done, r.FirstDelta)
	}
}
