package workspace

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/fastagent/fastagent/internal/tools"
)

// RulePaths are the paths, relative to the workspace, that define what the
// agent may do: its configuration, tool manifests, channels, schedules,
// state, secrets and version history. The agent's own tools never write
// them (write and edit refuse; the bash sandbox mounts them read-only).
var RulePaths = []string{ConfigFile, "tools", "channels", "schedules", ".fastagent", ".env", ".git"}

// SelfEditPaths are the paths, relative to the agent dir, that shape the
// agent's prompt; they are writable by the agent only with selfEdit: true.
var SelfEditPaths = []string{"persona.md", "AGENTS.md", "skills"}

// ProtectedPaths returns the absolute paths the agent's tools must not
// write in ws: RulePaths under both the working directory and the agent
// dir, plus SelfEditPaths unless selfEdit is set. It is the one list the
// write and edit tools and the bash sandbox share.
func ProtectedPaths(ws Workspace, selfEdit bool) []tools.Protected {
	dirs := []string{ws.Dir}
	if ws.AgentDir != "" && ws.AgentDir != ws.Dir {
		dirs = append(dirs, ws.AgentDir)
	}
	var out []tools.Protected
	seen := map[string]bool{}
	add := func(p, reason string) {
		if p = filepath.Clean(p); !seen[p] {
			seen[p] = true
			base := filepath.Base(p)
			out = append(out, tools.Protected{Path: p, Reason: reason, Secret: base == ".fastagent" || base == ".env"})
		}
	}
	for _, d := range dirs {
		for _, rel := range RulePaths {
			add(filepath.Join(d, rel), ruleReason(rel))
		}
	}
	if !selfEdit {
		for _, d := range dirs {
			for _, rel := range SelfEditPaths {
				add(filepath.Join(d, rel), "it shapes the agent's own prompt, and selfEdit is not enabled in "+ConfigFile)
			}
		}
	}
	return out
}

func ruleReason(rel string) string {
	switch rel {
	case ConfigFile:
		return "it is the agent's configuration (models, approvals, tools, MCP servers)"
	case "tools", "channels", "schedules":
		return "it defines the agent's " + rel
	case ".fastagent":
		return "it is the runtime's state directory"
	case ".env":
		return "it holds the operator's secrets"
	case ".git":
		return "it is the repository's history and hooks"
	}
	return "it is part of the agent's definition"
}

// secretEnvNames are the worker's own secrets by exact name.
var secretEnvNames = []string{
	"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OLLAMA_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
	"AZURE_OPENAI_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY", "OPENROUTER_API_KEY",
	"TEMPORAL_API_KEY", "TEMPORAL_TLS", "FASTAGENT_STORE", "FASTAGENT_API_TOKEN", "FASTAGENT_API_TOKENS",
	"FASTAGENT_API_TOKENS_FILE", "DATABASE_URL", "PGPASSWORD",
	"NATS_TOKEN", "NATS_CREDS", "NATS_USER", "NATS_PASSWORD", "NATS_NKEY", "NATS_URL",
	"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
}

// secretEnvPrefixes and secretEnvSuffixes catch the rest by shape.
var (
	secretEnvPrefixes = []string{"TEMPORAL_TLS_", "FASTAGENT_STORE_", "FASTAGENT_API_TOKEN", "FASTAGENT_NATS_", "NATS_"}
	secretEnvSuffixes = []string{"_API_KEY", "_APIKEY", "_SECRET", "_SECRET_KEY", "_TOKEN", "_TOKENS", "_PASSWORD", "_DSN", "_CREDS", "_CREDENTIALS", "_PRIVATE_KEY"}
)

// IsSecretEnv reports whether name looks like one of the worker's own
// secrets: a model provider key, Temporal credentials, the session store
// DSN, the API tokens, NATS credentials, or any name ending in _API_KEY,
// _SECRET, _TOKEN, _PASSWORD, _DSN, _CREDS and the like. Such names are kept
// from tools unless allowSecretEnv lists them.
func IsSecretEnv(name string) bool {
	n := strings.ToUpper(name)
	if slices.Contains(secretEnvNames, n) {
		return true
	}
	for _, p := range secretEnvPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	for _, s := range secretEnvSuffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}
