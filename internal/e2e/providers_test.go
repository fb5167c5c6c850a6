package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// seenRequest is what a provider's scripted server was asked: the HTTP
// path and query, the headers, the model named in the body and the body.
type seenRequest struct {
	Path, Query string
	Header      http.Header
	Model       string
	Body        []byte
}

// recordingFront serves h on loopback, recording each request's path,
// query and headers; rewrite, when set, is the path h is given (Azure's
// deployment path reaches a chat completions handler).
type recordingFront struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []seenRequest
}

func newRecordingFront(t *testing.T, h http.Handler, rewrite string) *recordingFront {
	t.Helper()
	f := &recordingFront{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.seen = append(f.seen, seenRequest{Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone()})
		f.mu.Unlock()
		if rewrite != "" {
			r.URL.Path = rewrite
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *recordingFront) requests() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.seen...)
}

// providerServer is a provider's scripted server: its base URL, the
// worker environment that points the provider at it, and what it saw.
type providerServer struct {
	env  []string
	seen func() []seenRequest
}

// chatServer scripts one answer on a chat completions (or, for the
// Anthropic shape, Messages API) server behind a recording front; env
// gets the front's URL. The model and body come from the decoded requests.
func chatServer(t *testing.T, shape modelserver.Shape, answer, rewrite string, env func(url string) []string) providerServer {
	t.Helper()
	s := modelserver.NewFor(shape)
	t.Cleanup(s.Close)
	s.Enqueue(modelserver.Reply{Text: strings.SplitAfter(answer, " ")})
	front := newRecordingFront(t, s.Handler(), rewrite)
	return providerServer{env: env(front.srv.URL), seen: func() []seenRequest {
		out := front.requests()
		reqs := s.Requests()
		for i := range out {
			if i < len(reqs) {
				out[i].Model, out[i].Body = reqs[i].Model, reqs[i].Raw
			}
		}
		return out
	}}
}

// nativeServer is a Gemini or Bedrock scripted server.
func nativeServer(t *testing.T, n *modelserver.Native, env func(url string) []string) providerServer {
	t.Helper()
	t.Cleanup(n.Close)
	return providerServer{env: env(n.URL()), seen: func() []seenRequest {
		var out []seenRequest
		for _, c := range n.Requests() {
			out = append(out, seenRequest{Path: c.Path, Query: c.RawQuery, Header: c.Header, Body: c.Body})
		}
		return out
	}}
}

func vars(kv ...string) []string {
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, kv[i]+"="+kv[i+1])
	}
	return out
}

// Every provider whose wire format can be scripted here answers a turn
// served by a `fastagent worker` process: the model is configured as
// provider/model (FASTAGENT_MODEL), the provider's base-URL variable points
// at a loopback scripted server, and the request reaches that server on
// the provider's path, naming the model, with the provider's credentials.
// Vertex AI is left out: its client speaks gRPC with Google Cloud
// credentials (internal/llm tests how it resolves).
func TestProvidersReachTheirServerThroughAWorker(t *testing.T) {
	const bedrockModel = "anthropic.claude-3-5-sonnet-20240620-v1:0"
	for _, tt := range []struct {
		name, spec string
		server     func(t *testing.T, answer string) providerServer
		wantPath   string
		wantModel  string // the model named in the request body; "" when it is in the path
		check      func(t *testing.T, r seenRequest)
	}{
		{name: "openai", spec: "openai/gpt-4.1", wantPath: "/v1/chat/completions", wantModel: "gpt-4.1",
			server: func(t *testing.T, a string) providerServer {
				return chatServer(t, modelserver.OpenAI, a, "", func(u string) []string {
					return vars("OPENAI_BASE_URL", u+"/v1", "OPENAI_API_KEY", "sk-openai-e2e")
				})
			},
			check: bearer("sk-openai-e2e")},
		{name: "openrouter", spec: "openrouter/anthropic/claude-sonnet-4.5", wantPath: "/api/v1/chat/completions", wantModel: "anthropic/claude-sonnet-4.5",
			server: func(t *testing.T, a string) providerServer {
				return chatServer(t, modelserver.OpenAI, a, "/v1/chat/completions", func(u string) []string {
					return vars("OPENROUTER_BASE_URL", u+"/api/v1", "OPENROUTER_API_KEY", "sk-or-e2e")
				})
			},
			check: bearer("sk-or-e2e")},
		{name: "mistral", spec: "mistral/mistral-large-latest", wantPath: "/v1/chat/completions", wantModel: "mistral-large-latest",
			server: func(t *testing.T, a string) providerServer {
				return chatServer(t, modelserver.OpenAI, a, "", func(u string) []string {
					return vars("MISTRAL_BASE_URL", u+"/v1", "MISTRAL_API_KEY", "mistral-e2e")
				})
			},
			check: bearer("mistral-e2e")},
		{name: "vllm", spec: "vllm/Qwen/Qwen3-8B", wantPath: "/v1/chat/completions", wantModel: "Qwen/Qwen3-8B",
			server: func(t *testing.T, a string) providerServer {
				return chatServer(t, modelserver.OpenAI, a, "", func(u string) []string { return vars("VLLM_BASE_URL", u+"/v1") })
			}},
		{name: "lmstudio", spec: "lmstudio/qwen2.5-7b-instruct", wantPath: "/v1/chat/completions", wantModel: "qwen2.5-7b-instruct",
			server: func(t *testing.T, a string) providerServer {
				return chatServer(t, modelserver.OpenAI, a, "", func(u string) []string { return vars("LMSTUDIO_BASE_URL", u+"/v1") })
			}},
		{name: "openai-compatible", spec: "openai-compatible/my-model", wantPath: "/v1/chat/completions", wantModel: "my-model",
			server: func(t *testing.T, a string) providerServer {
				return chatServer(t, modelserver.OpenAI, a, "", func(u string) []string {
					return vars("OPENAI_COMPATIBLE_BASE_URL", u+"/v1", "OPENAI_COMPATIBLE_API_KEY", "compat-e2e")
				})
			},
			check: bearer("compat-e2e")},
		{name: "ollama", spec: "ollama/llama3.1", wantPath: "/v1/chat/completions", wantModel: "llama3.1",
			server: func(t *testing.T, a string) providerServer {
				return chatServer(t, modelserver.OpenAI, a, "", func(u string) []string { return vars("OLLAMA_HOST", u) })
			}},
		{name: "azure", spec: "azure/my-gpt4o", wantPath: "/openai/deployments/my-gpt4o/chat/completions",
			server: func(t *testing.T, a string) providerServer {
				return chatServer(t, modelserver.OpenAI, a, "/v1/chat/completions", func(u string) []string {
					return vars("AZURE_OPENAI_ENDPOINT", u, "AZURE_OPENAI_API_KEY", "azure-e2e")
				})
			},
			check: func(t *testing.T, r seenRequest) {
				if r.Header.Get("api-key") != "azure-e2e" || r.Header.Get("Authorization") != "" || !strings.Contains(r.Query, "api-version=") {
					t.Errorf("Azure request: query %q, api-key %q, Authorization %q", r.Query, r.Header.Get("api-key"), r.Header.Get("Authorization"))
				}
			}},
		{name: "anthropic", spec: "anthropic/claude-sonnet-4-5", wantPath: "/v1/messages", wantModel: "claude-sonnet-4-5",
			server: func(t *testing.T, a string) providerServer {
				return chatServer(t, modelserver.Anthropic, a, "", func(u string) []string {
					return vars("ANTHROPIC_BASE_URL", u, "ANTHROPIC_API_KEY", "sk-ant-e2e")
				})
			},
			check: func(t *testing.T, r seenRequest) {
				if r.Header.Get("x-api-key") != "sk-ant-e2e" {
					t.Errorf("x-api-key %q", r.Header.Get("x-api-key"))
				}
			}},
		{name: "gemini", spec: "gemini/gemini-2.5-flash", wantPath: "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
			server: func(t *testing.T, a string) providerServer {
				return nativeServer(t, modelserver.NewGemini(modelserver.Reply{Text: strings.SplitAfter(a, " ")}), func(u string) []string {
					return vars("GEMINI_BASE_URL", u, "GEMINI_API_KEY", "gem-e2e")
				})
			},
			check: func(t *testing.T, r seenRequest) {
				if r.Header.Get("x-goog-api-key") != "gem-e2e" {
					t.Errorf("x-goog-api-key %q", r.Header.Get("x-goog-api-key"))
				}
			}},
		{name: "bedrock", spec: "bedrock/" + bedrockModel, wantPath: "/model/" + bedrockModel + "/invoke",
			server: func(t *testing.T, a string) providerServer {
				return nativeServer(t, modelserver.NewBedrock(modelserver.Reply{Text: []string{a}}), func(u string) []string {
					return vars("AWS_REGION", "eu-west-3", "AWS_ACCESS_KEY_ID", "AKIDFASTAGENTE2E", "AWS_SECRET_ACCESS_KEY", "bedrock-e2e-secret",
						"AWS_ENDPOINT_URL_BEDROCK_RUNTIME", u, "AWS_EC2_METADATA_DISABLED", "true")
				})
			},
			check: func(t *testing.T, r seenRequest) {
				auth := r.Header.Get("Authorization")
				if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDFASTAGENTE2E/") || !strings.Contains(auth, "/eu-west-3/bedrock/aws4_request") {
					t.Errorf("Authorization %q, want SigV4 for eu-west-3 bedrock", auth)
				}
				if strings.Contains(string(r.Body), "bedrock-e2e-secret") {
					t.Error("the secret key is in the body")
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newProcessEnv(t)
			answer := "answer from " + tt.name
			ps := tt.server(t, answer)
			e.extraEnv = append([]string{"FASTAGENT_MODEL=" + tt.spec}, ps.env...)
			e.startWorkerProcess(t)

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := agent.Collect(e.agent.Invoke(ctx, agent.Scope{Session: "provider-" + tt.name}, agent.Prompt{Text: "hello " + tt.name}))
			if err != nil || res.Text != answer {
				t.Fatalf("turn = %q, %v; want %q from the %s server", res.Text, err, answer, tt.name)
			}
			seen := ps.seen()
			if len(seen) == 0 {
				t.Fatal("the scripted server saw no request")
			}
			for _, r := range seen {
				if r.Path != tt.wantPath {
					t.Errorf("request on %s, want %s", r.Path, tt.wantPath)
				}
				if tt.wantModel != "" && r.Model != tt.wantModel {
					t.Errorf("request names model %q, want %q", r.Model, tt.wantModel)
				}
				if !strings.Contains(string(r.Body), "hello "+tt.name) {
					t.Errorf("request body lacks the prompt: %s", r.Body)
				}
				if tt.check != nil {
					tt.check(t, r)
				}
			}
		})
	}
}

// bearer checks the key was sent as the bearer token.
func bearer(key string) func(*testing.T, seenRequest) {
	return func(t *testing.T, r seenRequest) {
		if got := r.Header.Get("Authorization"); got != "Bearer "+key {
			t.Errorf("Authorization %q, want the bearer %s", got, key)
		}
	}
}

// Over a two-turn session served by a `fastagent worker` process against
// the scripted Anthropic server: each request carries cache_control on the
// system prompt and the last tool, and the signed thinking block of turn
// 1's reply is sent back unchanged in turn 2's request.
func TestAnthropicCachingAndThinkingThroughAWorker(t *testing.T) {
	e := newProcessEnv(t)
	e.writeConfig("retry:\n  heartbeat: 3s\nthinkingLevel: low\n")
	s := modelserver.NewAnthropic()
	t.Cleanup(s.Close)
	s.Enqueue(
		modelserver.Reply{Thinking: []string{"The user ", "greets me."}, Text: []string{"Hello", " there."}},
		modelserver.Reply{Thinking: []string{"Again."}, Text: []string{"Still", " here."}},
	)
	e.extraEnv = vars("FASTAGENT_MODEL", "anthropic/claude-sonnet-4-5", "ANTHROPIC_BASE_URL", s.URL(), "ANTHROPIC_API_KEY", "sk-ant-e2e")
	e.startWorkerProcess(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scope := agent.Scope{Session: "anthropic-cache-thinking"}
	for _, turn := range []struct{ prompt, want string }{{"hi", "Hello there."}, {"still there?", "Still here."}} {
		res, err := agent.Collect(e.agent.Invoke(ctx, scope, agent.Prompt{Text: turn.prompt}))
		if err != nil || res.Text != turn.want {
			t.Fatalf("turn %q = %q, %v; want %q", turn.prompt, res.Text, err, turn.want)
		}
	}
	reqs := s.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2 (one per turn)", len(reqs))
	}
	for i, r := range reqs {
		var body struct {
			System []map[string]any `json:"system"`
			Tools  []map[string]any `json:"tools"`
		}
		if err := json.Unmarshal(r.Raw, &body); err != nil {
			t.Fatal(err)
		}
		if len(body.System) == 0 || body.System[len(body.System)-1]["cache_control"] == nil {
			t.Errorf("request %d: system %v, want cache_control on it", i+1, body.System)
		}
		if len(body.Tools) == 0 || body.Tools[len(body.Tools)-1]["cache_control"] == nil {
			t.Errorf("request %d: %d tools, want cache_control on the last", i+1, len(body.Tools))
		}
		if r.ThinkingBudget == 0 {
			t.Errorf("request %d does not think", i+1)
		}
	}
	var second struct {
		Messages []struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(reqs[1].Raw, &second); err != nil {
		t.Fatal(err)
	}
	const signed = `{"signature":"sig-1","thinking":"The user greets me.","type":"thinking"}`
	found := false
	for _, m := range second.Messages {
		if m.Role == "assistant" && len(m.Content) > 0 && string(m.Content[0]) == signed {
			found = true
		}
	}
	if !found {
		t.Errorf("turn 2's request does not send turn 1's signed thinking block back unchanged first in its assistant turn; messages:\n%s", reqs[1].Raw)
	}
}
