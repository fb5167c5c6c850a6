// Package models knows what the runtime needs about chat models besides how
// to call them: a catalog of context windows and capabilities for the models
// people use with the supported providers, and the token budget a session
// keeps its context within (estimate, threshold, what compaction keeps).
package models

import (
	"strings"
)

// DefaultContextWindow is the window assumed for models the catalog does not
// know (as Flowbot and pi do); contextWindow in fastagent.yaml overrides it.
const DefaultContextWindow = 128_000

// Info is what the catalog knows about one model.
type Info struct {
	// ContextWindow is how many tokens a request (input plus output) may hold.
	ContextWindow int `json:"contextWindow"`
	// MaxOutput is the most output tokens one reply may have (0: unknown).
	MaxOutput int `json:"maxOutput,omitempty"`
	// Vision says whether the model reads images.
	Vision bool `json:"vision,omitempty"`
	// Reasoning says whether the model thinks before answering (reasoning
	// effort, extended thinking).
	Reasoning bool `json:"reasoning,omitempty"`
	// Known is false when the values are defaults for an unknown model.
	Known bool `json:"known"`
}

// entry is one catalog line: a model name prefix of one provider.
type entry struct {
	provider string
	prefix   string
	info     Info
}

func m(provider, prefix string, window, maxOut int, vision, reasoning bool) entry {
	return entry{provider, prefix, Info{ContextWindow: window, MaxOutput: maxOut, Vision: vision, Reasoning: reasoning, Known: true}}
}

// catalog lists model name prefixes; Lookup picks the longest matching one,
// so dated snapshots (gpt-4o-2024-08-06, claude-sonnet-4-5-20250929) and
// Ollama tags (llama3.1:8b) resolve to their family.
var catalog = []entry{
	// OpenAI
	m("openai", "gpt-3.5-turbo", 16_385, 4_096, false, false),
	m("openai", "gpt-4", 8_192, 8_192, false, false),
	m("openai", "gpt-4-turbo", 128_000, 4_096, true, false),
	m("openai", "gpt-4o", 128_000, 16_384, true, false),
	m("openai", "gpt-4o-mini", 128_000, 16_384, true, false),
	m("openai", "gpt-4.1", 1_047_576, 32_768, true, false),
	m("openai", "gpt-4.1-mini", 1_047_576, 32_768, true, false),
	m("openai", "gpt-4.1-nano", 1_047_576, 32_768, true, false),
	m("openai", "gpt-4.5", 128_000, 16_384, true, false),
	m("openai", "o1", 200_000, 100_000, true, true),
	m("openai", "o1-mini", 128_000, 65_536, false, true),
	m("openai", "o1-pro", 200_000, 100_000, true, true),
	m("openai", "o3", 200_000, 100_000, true, true),
	m("openai", "o3-mini", 200_000, 100_000, false, true),
	m("openai", "o3-pro", 200_000, 100_000, true, true),
	m("openai", "o4-mini", 200_000, 100_000, true, true),
	m("openai", "gpt-5", 400_000, 128_000, true, true),
	m("openai", "gpt-5-chat", 128_000, 16_384, true, false),
	m("openai", "gpt-oss", 131_072, 131_072, false, true),

	// Anthropic
	m("anthropic", "claude-3-haiku", 200_000, 4_096, true, false),
	m("anthropic", "claude-3-opus", 200_000, 4_096, true, false),
	m("anthropic", "claude-3-sonnet", 200_000, 4_096, true, false),
	m("anthropic", "claude-3-5-haiku", 200_000, 8_192, true, false),
	m("anthropic", "claude-3-5-sonnet", 200_000, 8_192, true, false),
	m("anthropic", "claude-3-7-sonnet", 200_000, 64_000, true, true),
	m("anthropic", "claude-sonnet-4", 200_000, 64_000, true, true),
	m("anthropic", "claude-opus-4", 200_000, 32_000, true, true),
	m("anthropic", "claude-opus-4-5", 200_000, 64_000, true, true),
	m("anthropic", "claude-haiku-4", 200_000, 64_000, true, true),
	m("anthropic", "claude-sonnet-4-5", 200_000, 64_000, true, true),

	// Gemini (the Gemini API and Vertex AI)
	m("gemini", "gemini-1.5-flash", 1_048_576, 8_192, true, false),
	m("gemini", "gemini-1.5-pro", 2_097_152, 8_192, true, false),
	m("gemini", "gemini-2.0-flash", 1_048_576, 8_192, true, false),
	m("gemini", "gemini-2.5-flash", 1_048_576, 65_536, true, true),
	m("gemini", "gemini-2.5-pro", 1_048_576, 65_536, true, true),

	// Mistral
	m("mistral", "mistral-large", 131_072, 0, false, false),
	m("mistral", "mistral-medium", 131_072, 0, true, false),
	m("mistral", "mistral-small", 131_072, 0, true, false),
	m("mistral", "codestral", 256_000, 0, false, false),
	m("mistral", "magistral", 40_000, 0, false, true),

	// Ollama: the models' own windows. Ollama serves a smaller num_ctx
	// unless told otherwise; set contextWindow to what the server runs.
	m("ollama", "llama3", 8_192, 0, false, false),
	m("ollama", "llama3.1", 131_072, 0, false, false),
	m("ollama", "llama3.2", 131_072, 0, false, false),
	m("ollama", "llama3.2-vision", 131_072, 0, true, false),
	m("ollama", "llama3.3", 131_072, 0, false, false),
	m("ollama", "llama4", 1_048_576, 0, true, false),
	m("ollama", "qwen2.5", 32_768, 0, false, false),
	m("ollama", "qwen2.5-coder", 32_768, 0, false, false),
	m("ollama", "qwen2.5vl", 128_000, 0, true, false),
	m("ollama", "qwen3", 40_960, 0, false, true),
	m("ollama", "qwen3-coder", 262_144, 0, false, false),
	m("ollama", "mistral", 32_768, 0, false, false),
	m("ollama", "mistral-nemo", 131_072, 0, false, false),
	m("ollama", "mistral-small", 131_072, 0, true, false),
	m("ollama", "mixtral", 32_768, 0, false, false),
	m("ollama", "gemma2", 8_192, 0, false, false),
	m("ollama", "gemma3", 131_072, 0, true, false),
	m("ollama", "phi3", 131_072, 0, false, false),
	m("ollama", "phi4", 16_384, 0, false, false),
	m("ollama", "deepseek-r1", 131_072, 0, false, true),
	m("ollama", "deepseek-coder-v2", 163_840, 0, false, false),
	m("ollama", "gpt-oss", 131_072, 0, false, true),
	m("ollama", "llava", 4_096, 0, true, false),
	m("ollama", "codellama", 16_384, 0, false, false),
}

// Lookup returns what the catalog knows about spec ("provider/model"); an
// unknown model gets DefaultContextWindow and Known false.
func Lookup(spec string) Info {
	provider, name, ok := strings.Cut(strings.TrimSpace(spec), "/")
	if !ok {
		return Info{ContextWindow: DefaultContextWindow}
	}
	name = strings.ToLower(name)
	provider, name = family(provider, name)
	if provider == "ollama" {
		name, _, _ = strings.Cut(name, ":") // llama3.1:8b → llama3.1
		name = strings.TrimPrefix(name, "library/")
	}
	best := -1
	for i, e := range catalog {
		if e.provider != provider || !familyPrefix(name, e.prefix) {
			continue
		}
		if best < 0 || len(e.prefix) > len(catalog[best].prefix) {
			best = i
		}
	}
	if best < 0 {
		return Info{ContextWindow: DefaultContextWindow}
	}
	return catalog[best].info
}

// family maps a provider that serves another vendor's models to the
// catalog's vendor and model name: an Azure deployment named after its model,
// OpenRouter's vendor/model, Vertex AI's Gemini models, Bedrock's
// [region.]vendor.model-version IDs.
func family(provider, name string) (string, string) {
	switch provider {
	case "azure":
		return "openai", name
	case "vertex":
		return "gemini", name
	case "openrouter":
		if vendor, model, ok := strings.Cut(name, "/"); ok {
			if vendor == "google" {
				vendor = "gemini"
			}
			// OpenRouter writes versions with dots (claude-sonnet-4.5).
			if vendor == "anthropic" {
				model = strings.ReplaceAll(model, ".", "-")
			}
			return vendor, model
		}
	case "bedrock":
		parts := strings.Split(name, ".")
		for i := 0; i+1 < len(parts); i++ {
			if parts[i] == "anthropic" || parts[i] == "mistral" || parts[i] == "meta" {
				return parts[i], strings.Join(parts[i+1:], ".")
			}
		}
	}
	return provider, name
}

// familyPrefix reports whether name is prefix itself or prefix followed by a
// separator, so "gpt-4o" does not claim "gpt-4oo" and "o1" not "o10".
func familyPrefix(name, prefix string) bool {
	if !strings.HasPrefix(name, prefix) {
		return false
	}
	if len(name) == len(prefix) {
		return true
	}
	switch name[len(prefix)] {
	case '-', ':', '@', '_', '.':
		// "gpt-4.1" is its own family, not gpt-4 followed by ".1": a
		// longer entry wins anyway, so the separator only guards unknowns.
		return true
	}
	return false
}
