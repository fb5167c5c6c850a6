package llm

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/tmc/langchaingo/llms/bedrock"
	"github.com/tmc/langchaingo/llms/googleai"
	"github.com/tmc/langchaingo/llms/googleai/vertex"
	"github.com/tmc/langchaingo/llms/openai"
	"google.golang.org/api/option"
)

// compatible describes a provider that speaks OpenAI's chat completions
// API at another address: the spec's provider word, the environment
// variables of its endpoint and key, the default endpoint ("" = the URL
// variable is required) and whether a key is required off loopback.
type compatible struct {
	keyEnv, urlEnv string
	defaultURL     string
	needsKey       bool
	// legacyMaxTokens sends max_tokens (servers other than OpenAI's own).
	legacyMaxTokens bool
}

// compatibles are the OpenAI-compatible hosts New knows by name.
var compatibles = map[string]compatible{
	// OpenRouter: model names carry the vendor (openrouter/anthropic/claude-sonnet-4.5).
	"openrouter": {keyEnv: "OPENROUTER_API_KEY", urlEnv: "OPENROUTER_BASE_URL",
		defaultURL: "https://openrouter.ai/api/v1", needsKey: true, legacyMaxTokens: true},
	// Mistral's La Plateforme speaks chat completions with tools and
	// streaming; langchaingo's own mistral client takes no HTTP client and
	// reports no finish reason when streaming, so the openai client is used.
	"mistral": {keyEnv: "MISTRAL_API_KEY", urlEnv: "MISTRAL_BASE_URL",
		defaultURL: "https://api.mistral.ai/v1", needsKey: true, legacyMaxTokens: true},
	"vllm": {keyEnv: "VLLM_API_KEY", urlEnv: "VLLM_BASE_URL",
		defaultURL: "http://127.0.0.1:8000/v1", legacyMaxTokens: true},
	"lmstudio": {keyEnv: "LMSTUDIO_API_KEY", urlEnv: "LMSTUDIO_BASE_URL",
		defaultURL: "http://127.0.0.1:1234/v1", legacyMaxTokens: true},
	// Any other server: its URL is required, its key optional.
	"openai-compatible": {keyEnv: "OPENAI_COMPATIBLE_API_KEY", urlEnv: "OPENAI_COMPATIBLE_BASE_URL",
		legacyMaxTokens: true},
}

// initCompatible builds an openai client for one of compatibles.
func (m *model) initCompatible(c compatible, getenv func(string) string) error {
	m.keyEnv, m.urlEnv = c.keyEnv, c.urlEnv
	base := strings.TrimSpace(getenv(c.urlEnv))
	if base == "" {
		if c.defaultURL == "" {
			return fmt.Errorf("llm: %s needs %s: set it to the server's OpenAI-compatible base URL "+
				"(for example http://127.0.0.1:8080/v1): %w", m.spec, c.urlEnv, ErrNotConfigured)
		}
		base = c.defaultURL
	}
	u, err := checkURL(c.urlEnv, base)
	if err != nil {
		return err
	}
	m.baseURL = strings.TrimSuffix(u.String(), "/")
	key := strings.TrimSpace(getenv(c.keyEnv))
	switch {
	case key != "":
		m.secret = key
	case c.needsKey && !isLoopback(u):
		return fmt.Errorf("llm: %s needs %s: set it in the environment: %w", m.spec, c.keyEnv, ErrNotConfigured)
	default:
		key = localToken
	}
	m.flavor = flavorOpenAI
	m.legacyMaxTokens = c.legacyMaxTokens
	llm, err := openai.New(
		openai.WithToken(key),
		openai.WithModel(m.name),
		openai.WithBaseURL(m.baseURL),
		openai.WithOrganization(""),
		openai.WithHTTPClient(m.client),
	)
	if err != nil {
		return fmt.Errorf("llm: %s: creating the OpenAI-compatible client: %w", m.spec, err)
	}
	m.llm = llm
	return nil
}

// defaultAzureAPIVersion is the Azure OpenAI data-plane API version used
// when AZURE_OPENAI_API_VERSION is unset (the latest GA version that takes
// tools, streaming usage and max_completion_tokens).
const defaultAzureAPIVersion = "2024-10-21"

// initAzure talks to an Azure OpenAI deployment: azure/<deployment>.
func (m *model) initAzure(getenv func(string) string) error {
	m.keyEnv, m.urlEnv = "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT"
	base := strings.TrimSpace(getenv("AZURE_OPENAI_ENDPOINT"))
	if base == "" {
		return fmt.Errorf("llm: %s needs AZURE_OPENAI_ENDPOINT: set it to the resource's endpoint "+
			"(https://<resource>.openai.azure.com): %w", m.spec, ErrNotConfigured)
	}
	u, err := checkURL("AZURE_OPENAI_ENDPOINT", base)
	if err != nil {
		return err
	}
	m.baseURL = strings.TrimSuffix(u.String(), "/")
	key := strings.TrimSpace(getenv("AZURE_OPENAI_API_KEY"))
	if key == "" {
		return fmt.Errorf("llm: %s needs AZURE_OPENAI_API_KEY: set it to one of the resource's keys: %w", m.spec, ErrNotConfigured)
	}
	m.secret = key
	version := strings.TrimSpace(getenv("AZURE_OPENAI_API_VERSION"))
	if version == "" {
		version = defaultAzureAPIVersion
	}
	m.flavor = flavorOpenAI
	llm, err := openai.New(
		openai.WithAPIType(openai.APITypeAzure),
		openai.WithAPIVersion(version),
		openai.WithToken(key),
		openai.WithModel(m.name),
		openai.WithBaseURL(m.baseURL),
		openai.WithHTTPClient(m.client),
	)
	if err != nil {
		return fmt.Errorf("llm: %s: creating the Azure OpenAI client: %w", m.spec, err)
	}
	m.llm = llm
	return nil
}

const defaultGeminiURL = "https://generativelanguage.googleapis.com"

// initGemini talks to the Gemini API (Google AI Studio) through
// langchaingo's googleai client over REST. The key is sent by our own
// transport as x-goog-api-key: Google's transport, which would add it,
// is replaced by ours (status, stall watchdog).
func (m *model) initGemini(getenv func(string) string) error {
	m.keyEnv, m.urlEnv = "GEMINI_API_KEY", "GEMINI_BASE_URL"
	key := strings.TrimSpace(getenv("GEMINI_API_KEY"))
	if key == "" {
		if key = strings.TrimSpace(getenv("GOOGLE_API_KEY")); key != "" {
			m.keyEnv = "GOOGLE_API_KEY"
		}
	}
	base := strings.TrimSpace(getenv("GEMINI_BASE_URL"))
	if base == "" {
		base = defaultGeminiURL
	}
	u, err := checkURL("GEMINI_BASE_URL", base)
	if err != nil {
		return err
	}
	if key == "" {
		if !isLoopback(u) {
			return fmt.Errorf("llm: %s needs GEMINI_API_KEY (or GOOGLE_API_KEY): set it in the environment: %w", m.spec, ErrNotConfigured)
		}
		key = localToken
	} else {
		m.secret = key
	}
	m.baseURL = strings.TrimSuffix(u.String(), "/")
	m.flavor = flavorGoogle
	hc := *m.client
	hc.Transport = headerTransport{base: hc.Transport, header: "x-goog-api-key", value: key}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	llm, err := googleai.New(ctx,
		googleai.WithAPIKey(key),
		googleai.WithHTTPClient(&hc),
		googleai.WithDefaultModel(m.name),
		googleai.WithDefaultMaxTokens(defaultAnthropicMaxTokens),
		func(o *googleai.Options) {
			o.ClientOptions = append(o.ClientOptions, option.WithEndpoint(m.baseURL))
		},
	)
	if err != nil {
		return fmt.Errorf("llm: %s: creating the Gemini client: %w", m.spec, m.scrubErr(err))
	}
	m.llm = llm
	return nil
}

// initVertex talks to Gemini on Vertex AI through langchaingo's vertex
// client (gRPC, Application Default Credentials). Its exchange is not
// visible to our transport, so errors are classified as a wrapped client's.
func (m *model) initVertex(getenv func(string) string) error {
	m.urlEnv = "GOOGLE_CLOUD_PROJECT"
	project := strings.TrimSpace(getenv("GOOGLE_CLOUD_PROJECT"))
	if project == "" {
		project = strings.TrimSpace(getenv("VERTEX_PROJECT"))
	}
	if project == "" {
		return fmt.Errorf("llm: %s needs GOOGLE_CLOUD_PROJECT: set it to the Google Cloud project that has Vertex AI enabled: %w",
			m.spec, ErrNotConfigured)
	}
	location := strings.TrimSpace(getenv("GOOGLE_CLOUD_LOCATION"))
	if location == "" {
		location = strings.TrimSpace(getenv("VERTEX_LOCATION"))
	}
	if location == "" {
		location = "us-central1"
	}
	opts := []googleai.Option{
		googleai.WithCloudProject(project),
		googleai.WithCloudLocation(location),
		googleai.WithDefaultModel(m.name),
		googleai.WithDefaultMaxTokens(defaultAnthropicMaxTokens),
	}
	creds := strings.TrimSpace(getenv("GOOGLE_APPLICATION_CREDENTIALS"))
	if creds != "" {
		opts = append(opts, googleai.WithCredentialsFile(creds))
	}
	m.baseURL = "vertex:" + project + "/" + location
	m.flavor = flavorGoogle
	m.opaque = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	llm, err := vertex.New(ctx, opts...)
	if err != nil {
		return fmt.Errorf("llm: %s: creating the Vertex AI client (credentials come from GOOGLE_APPLICATION_CREDENTIALS "+
			"or `gcloud auth application-default login`): %v: %w", m.spec, err, ErrNotConfigured)
	}
	m.llm = llm
	return nil
}

// initBedrock talks to Amazon Bedrock's InvokeModel API through
// langchaingo's bedrock client, signed with SigV4. The region is
// AWS_REGION (or AWS_DEFAULT_REGION); credentials are AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN) when set, else the SDK's
// default chain (AWS_PROFILE, SSO, web identity, container or instance
// role). AWS_ENDPOINT_URL_BEDROCK_RUNTIME points at another endpoint (a
// VPC endpoint, a gateway).
func (m *model) initBedrock(getenv func(string) string) error {
	m.keyEnv, m.urlEnv = "AWS_ACCESS_KEY_ID", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"
	region := strings.TrimSpace(getenv("AWS_REGION"))
	if region == "" {
		region = strings.TrimSpace(getenv("AWS_DEFAULT_REGION"))
	}
	if region == "" {
		return fmt.Errorf("llm: %s needs AWS_REGION: set it to the region Bedrock serves the model in (for example us-east-1): %w",
			m.spec, ErrNotConfigured)
	}
	loadOpts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(region),
	}
	if id := strings.TrimSpace(getenv("AWS_ACCESS_KEY_ID")); id != "" {
		secret := strings.TrimSpace(getenv("AWS_SECRET_ACCESS_KEY"))
		if secret == "" {
			return fmt.Errorf("llm: %s: AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both: %w", m.spec, ErrNotConfigured)
		}
		m.secret = secret
		loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(id, secret, getenv("AWS_SESSION_TOKEN"))))
	} else if p := strings.TrimSpace(getenv("AWS_PROFILE")); p != "" {
		loadOpts = append(loadOpts, awsconfig.WithSharedConfigProfile(p))
	}
	if strings.EqualFold(strings.TrimSpace(getenv("AWS_EC2_METADATA_DISABLED")), "true") {
		loadOpts = append(loadOpts, awsconfig.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return fmt.Errorf("llm: %s: loading the AWS configuration: %w: %w", m.spec, err, ErrNotConfigured)
	}
	m.baseURL = "https://bedrock-runtime." + region + ".amazonaws.com"
	var endpoint *string
	if e := strings.TrimSpace(getenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")); e != "" {
		u, err := checkURL("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", e)
		if err != nil {
			return err
		}
		m.baseURL = strings.TrimSuffix(u.String(), "/")
		endpoint = aws.String(m.baseURL)
	}
	client := bedrockruntime.NewFromConfig(cfg, func(o *bedrockruntime.Options) {
		if endpoint != nil {
			o.BaseEndpoint = endpoint
		}
		o.HTTPClient = m.client
		o.RetryMaxAttempts = 1 // the activity's retry policy retries
	})
	m.flavor = flavorBedrock
	llm, err := bedrock.New(bedrock.WithClient(client), bedrock.WithModel(m.name))
	if err != nil {
		return fmt.Errorf("llm: %s: creating the Bedrock client: %w", m.spec, err)
	}
	m.llm = llm
	return nil
}

// headerTransport sets one request header (an API key langchaingo's
// client would otherwise add through a transport of its own).
type headerTransport struct {
	base          http.RoundTripper
	header, value string
}

// RoundTrip implements http.RoundTripper.
func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set(t.header, t.value)
	return t.base.RoundTrip(r)
}

// scrubErr is scrub for an error, kept an error.
func (m *model) scrubErr(err error) error {
	if err == nil || m.secret == "" {
		return err
	}
	return fmt.Errorf("%s", m.scrub(err.Error()))
}
