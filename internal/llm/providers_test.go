package llm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
)

// toolRequest is a prompt with a system prompt and one tool, so each fake
// sees every part of a request.
func toolRequest(text string) Request {
	return Request{
		System:   "You are terse.",
		Messages: []transcript.Message{{Role: transcript.RoleUser, Text: text}},
		Tools: []agent.ToolSpec{{Name: "read", Description: "Read a file",
			Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}},
	}
}

// Each OpenAI-compatible host reaches a chat completions server with its
// own key as the bearer token and the model name as written after the
// provider (OpenRouter's carries the vendor).
func TestCompatibleHostsReachTheirServer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ spec, urlEnv, keyEnv, model string }{
		{"openrouter/anthropic/claude-sonnet-4.5", "OPENROUTER_BASE_URL", "OPENROUTER_API_KEY", "anthropic/claude-sonnet-4.5"},
		{"mistral/mistral-large-latest", "MISTRAL_BASE_URL", "MISTRAL_API_KEY", "mistral-large-latest"},
		{"vllm/Qwen/Qwen3-8B", "VLLM_BASE_URL", "VLLM_API_KEY", "Qwen/Qwen3-8B"},
		{"lmstudio/qwen2.5-7b-instruct", "LMSTUDIO_BASE_URL", "LMSTUDIO_API_KEY", "qwen2.5-7b-instruct"},
		{"openai-compatible/my-model", "OPENAI_COMPATIBLE_BASE_URL", "OPENAI_COMPATIBLE_API_KEY", "my-model"},
	} {
		t.Run(tt.spec, func(t *testing.T) {
			s := modelserver.New()
			defer s.Close()
			s.Enqueue(modelserver.Reply{Text: []string{"hel", "lo"}})
			key := "key-for-" + strings.ToLower(tt.keyEnv)
			m, err := New(tt.spec, Options{Getenv: env(tt.urlEnv, s.URL(), tt.keyEnv, key)})
			if err != nil {
				t.Fatal(err)
			}
			msg, err := m.Generate(context.Background(), toolRequest("hi"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Text != "hello" || msg.StopReason != transcript.StopEnd {
				t.Errorf("reply %q (%s), want hello (stop)", msg.Text, msg.StopReason)
			}
			reqs := s.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.APIKey != key || r.Model != tt.model || r.LastUserText() != "hi" || len(r.Tools) != 1 || r.Tools[0].Name != "read" {
				t.Errorf("request: key %q model %q user %q tools %v; want key %q model %q", r.APIKey, r.Model, r.LastUserText(), r.Tools, key, tt.model)
			}
		})
	}
}

// Azure OpenAI: the deployment's path with the api-version query, the key
// in the api-key header (not a bearer token).
func TestAzureReachesDeployment(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	s.Enqueue(modelserver.Reply{Text: []string{"azure ok"}})
	type seen struct{ path, version, key, auth string }
	got := make(chan seen, 1)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.Path, r.URL.Query().Get("api-version"), r.Header.Get("api-key"), r.Header.Get("Authorization")}
		r.URL.Path = "/v1/chat/completions"
		s.Handler().ServeHTTP(w, r)
	}))
	defer front.Close()
	m, err := New("azure/my-gpt4o", Options{Getenv: env("AZURE_OPENAI_ENDPOINT", front.URL, "AZURE_OPENAI_API_KEY", "azure-key-1")})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := m.Generate(context.Background(), toolRequest("hi"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Text != "azure ok" {
		t.Errorf("reply %q", msg.Text)
	}
	sn := <-got
	if sn.path != "/openai/deployments/my-gpt4o/chat/completions" || sn.version != defaultAzureAPIVersion ||
		sn.key != "azure-key-1" || sn.auth != "" {
		t.Errorf("Azure request: %+v", sn)
	}
	if r := s.Requests()[0]; r.LastUserText() != "hi" || len(r.Tools) != 1 {
		t.Errorf("body: user %q tools %v", r.LastUserText(), r.Tools)
	}
}

// Gemini: langchaingo's googleai client over REST reaches the model's
// streamGenerateContent with the key in x-goog-api-key, the system prompt
// as systemInstruction and the tool as a function declaration; text
// streams and a function call comes back as a tool call.
func TestGeminiReachesServer(t *testing.T) {
	t.Parallel()
	s := modelserver.NewGemini(modelserver.Reply{Text: []string{"Reading ", "it."},
		ToolCalls: []modelserver.ToolCall{{Name: "read", Args: `{"path":"a.txt"}`}},
		Usage:     &modelserver.Usage{PromptTokens: 42, CompletionTokens: 7}})
	defer s.Close()
	m, err := New("gemini/gemini-2.5-flash", Options{Getenv: env("GEMINI_BASE_URL", s.URL(), "GEMINI_API_KEY", "gem-key-1")})
	if err != nil {
		t.Fatal(err)
	}
	c := newCollector()
	msg, err := m.Generate(context.Background(), toolRequest("read a.txt"), c.add)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Text != "Reading it." || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Name != "read" ||
		string(msg.ToolCalls[0].Args) != `{"path":"a.txt"}` || msg.StopReason != transcript.StopToolUse {
		t.Errorf("reply %+v", msg)
	}
	// langchaingo v0.1.14 keeps the first chunk's usage of a stream: the
	// prompt's count is right, the output's is not known yet.
	if msg.Usage == nil || msg.Usage.Input != 42 {
		t.Errorf("usage %+v", msg.Usage)
	}
	if len(c.get()) < 2 {
		t.Errorf("deltas %v, want the text streamed", c.get())
	}
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1beta/models/gemini-2.5-flash:streamGenerateContent" || r.Header.Get("x-goog-api-key") != "gem-key-1" {
		t.Errorf("request %s?%s key %q", r.Path, r.RawQuery, r.Header.Get("x-goog-api-key"))
	}
	var body struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"contents"`
		SystemInstruction struct {
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"systemInstruction"`
		Tools []struct {
			FunctionDeclarations []struct {
				Name string `json:"name"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Contents) != 1 || body.Contents[0].Parts[0].Text != "read a.txt" ||
		len(body.SystemInstruction.Parts) != 1 || body.SystemInstruction.Parts[0].Text != "You are terse." ||
		len(body.Tools) != 1 || body.Tools[0].FunctionDeclarations[0].Name != "read" {
		t.Errorf("body %s", r.Body)
	}
}

// Bedrock: InvokeModel on the model's path, signed with SigV4 for the
// region and service from the static keys, the Anthropic body with the
// system prompt, message and tool.
func TestBedrockReachesServer(t *testing.T) {
	t.Parallel()
	s := modelserver.NewBedrock(modelserver.Reply{Text: []string{"from bedrock"},
		ToolCalls: []modelserver.ToolCall{{ID: "toolu_b1", Name: "read", Args: `{"path":"b.txt"}`}},
		Usage:     &modelserver.Usage{PromptTokens: 30, CompletionTokens: 9}})
	defer s.Close()
	const id = "anthropic.claude-3-5-sonnet-20240620-v1:0"
	m, err := New("bedrock/"+id, Options{Getenv: env("AWS_REGION", "eu-west-3", "AWS_ACCESS_KEY_ID", "AKIDFASTAGENTTEST",
		"AWS_SECRET_ACCESS_KEY", "bedrock-secret", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", s.URL(), "AWS_EC2_METADATA_DISABLED", "true")})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := m.Generate(context.Background(), toolRequest("read b.txt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Text != "from bedrock" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].ID != "toolu_b1" || msg.StopReason != transcript.StopToolUse {
		t.Errorf("reply %+v", msg)
	}
	if msg.Usage == nil || msg.Usage.Input != 30 || msg.Usage.Output != 9 {
		t.Errorf("usage %+v", msg.Usage)
	}
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	auth := r.Header.Get("Authorization")
	if r.Path != "/model/"+id+"/invoke" || !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDFASTAGENTTEST/") ||
		!strings.Contains(auth, "/eu-west-3/bedrock/aws4_request") {
		t.Errorf("request %s, Authorization %q", r.Path, auth)
	}
	var body struct {
		Version  string `json:"anthropic_version"`
		System   string `json:"system"`
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Version == "" || body.System != "You are terse." || len(body.Messages) != 1 || len(body.Tools) != 1 || body.Tools[0].Name != "read" {
		t.Errorf("body %s", r.Body)
	}
	if strings.Contains(string(r.Body), "bedrock-secret") {
		t.Error("the secret key is in the body")
	}
}

// A missing setting is an error naming the variable to set, for every
// provider; nothing is contacted. Vertex AI cannot be faked here (its
// client authenticates with Google Cloud credentials over gRPC): its
// resolution is what is tested.
func TestProviderConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		spec string
		env  func(string) string
		want string
	}{
		{"openrouter/openai/gpt-4o", env(), "OPENROUTER_API_KEY"},
		{"mistral/mistral-large-latest", env(), "MISTRAL_API_KEY"},
		{"openai-compatible/m", env(), "OPENAI_COMPATIBLE_BASE_URL"},
		{"vllm/m", env("VLLM_BASE_URL", "vllm:8000"), "VLLM_BASE_URL"},
		{"azure/dep", env("AZURE_OPENAI_API_KEY", "k"), "AZURE_OPENAI_ENDPOINT"},
		{"azure/dep", env("AZURE_OPENAI_ENDPOINT", "https://r.openai.azure.com"), "AZURE_OPENAI_API_KEY"},
		{"gemini/gemini-2.5-pro", env(), "GEMINI_API_KEY"},
		{"vertex/gemini-2.5-pro", env(), "GOOGLE_CLOUD_PROJECT"},
		{"vertex/gemini-2.5-pro", env("GOOGLE_CLOUD_PROJECT", "p", "GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/adc.json"), "GOOGLE_APPLICATION_CREDENTIALS"},
		{"bedrock/anthropic.claude-3-5-haiku-20241022-v1:0", env(), "AWS_REGION"},
		{"bedrock/anthropic.claude-3-5-haiku-20241022-v1:0", env("AWS_REGION", "us-east-1", "AWS_ACCESS_KEY_ID", "AKID"), "AWS_SECRET_ACCESS_KEY"},
		{"nosuch/model", env(), "gemini/, vertex/, bedrock/"},
	} {
		_, err := New(tt.spec, Options{Getenv: tt.env})
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrNotConfigured) {
			t.Errorf("%s: error %v, want one naming %s", tt.spec, err, tt.want)
		}
	}
	// Local servers need no key; the defaults are their usual ports.
	for spec, want := range map[string]string{"vllm/m": "http://127.0.0.1:8000/v1", "lmstudio/m": "http://127.0.0.1:1234/v1"} {
		m, err := New(spec, Options{Getenv: env()})
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if got := m.(*model).baseURL; got != want {
			t.Errorf("%s: base URL %q, want %q", spec, got, want)
		}
	}
	// Vertex resolves project and location; with credentials it would call
	// <location>-aiplatform.googleapis.com.
	m := &model{spec: "vertex/gemini-2.5-pro", name: "gemini-2.5-pro"}
	_ = m.initVertex(env("GOOGLE_CLOUD_PROJECT", "proj-1", "GOOGLE_CLOUD_LOCATION", "europe-west4",
		"GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/adc.json"))
	if m.baseURL != "vertex:proj-1/europe-west4" {
		t.Errorf("vertex resolved to %q", m.baseURL)
	}
}
