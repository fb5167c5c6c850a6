package main

import (
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// processEnv documents environment variables read outside flags: secrets and
// settings model clients and the Temporal client take from the environment.
var processEnv = []struct{ name, what string }{
	{"FASTAGENT_MODEL", "model as provider/model (overrides fastagent.yaml)"},
	{"OPENAI_API_KEY", "OpenAI key (worker only)"},
	{"OPENAI_BASE_URL", "any OpenAI-compatible endpoint"},
	{"ANTHROPIC_API_KEY", "Anthropic key (worker only)"},
	{"OLLAMA_HOST", "Ollama address (default http://127.0.0.1:11434)"},
	{"TEMPORAL_API_KEY", "Temporal API key (implies TLS); without it fire/schedule/rollout send a running dev's key from <state-dir>/temporal-token"},
	{"TEMPORAL_TLS_CERT", "mTLS client certificate file"},
	{"TEMPORAL_TLS_KEY", "mTLS client key file"},
	{"TEMPORAL_TLS", "true: TLS without a client certificate; false: the API key in plaintext (loopback only)"},
	{"TEMPORAL_TLS_CA", "PEM CA bundle to trust (self-hosted TLS clusters)"},
	{"TEMPORAL_TLS_SERVER_NAME", "server name to verify in the cluster's certificate"},
	{"TEMPORAL_GRPC_GZIP", "true/false: gzip the requests to Temporal (default: yes, except to a loopback address)"},
	{"FASTAGENT_DEPLOYMENT", "Temporal Worker Deployment name: the worker runs versioned (default: unversioned)"},
	{"FASTAGENT_BUILD_ID", "the worker's build ID in that deployment (default: the binary's version or VCS revision)"},
	{"FASTAGENT_API_TOKEN", "API token: the admin token the ingress accepts; the token invoke/session send"},
	{"FASTAGENT_API_TOKENS", "API tokens the ingress accepts: principal:rights:sha256hex lines (or ;-separated)"},
	{"FASTAGENT_CODEC_KEYS", "payload encryption keys id:base64[,…] (the first encrypts); every process of a deployment needs the same"},
	{"FASTAGENT_CODEC_KEY_FILE", "a file of those keys instead"},
	{"FASTAGENT_CODEC_ORIGINS", "Web UI origins allowed to call the codec server, comma-separated (e.g. https://cloud.temporal.io)"},
	{"FASTAGENT_METRICS_ADDR", "serve GET /metrics and the worker's probe GET /health on this address, without a token (e.g. 0.0.0.0:9090)"},
	{"FASTAGENT_SANDBOX", "tool confinement: auto (default: namespaces, else Landlock), namespaces, landlock, or off (unconfined); overrides tools.sandbox"},
	{"FASTAGENT_DEVSERVER", "the fastagent-devserver program dev runs (default: next to fastagent, on PATH, else built once with go)"},
	{"FASTAGENT_SESSION", "default --session of invoke"},
	{"FASTAGENT_URL", "default --url of invoke"},
}

// envHelp is the Environment section of `fastagent --help`.
func envHelp() string {
	var b strings.Builder
	b.WriteString("Environment (besides the [VARIABLE] shown for each flag):\n")
	for _, e := range processEnv {
		b.WriteString("  " + e.name + strings.Repeat(" ", max(1, 20-len(e.name))) + e.what + "\n")
	}
	return b.String()
}

var flagEnv = regexp.MustCompile(`\[([A-Z][A-Z0-9_]+)\]`)

// documentedEnv lists every variable the CLI documents for cmd: the
// [VARIABLE] of each of its flags (and inherited ones) plus processEnv.
func documentedEnv(cmd *cobra.Command) []string {
	set := map[string]bool{}
	for _, e := range processEnv {
		set[e.name] = true
	}
	visit := func(f *pflag.Flag) {
		for _, m := range flagEnv.FindAllStringSubmatch(f.Usage, -1) {
			set[m[1]] = true
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
