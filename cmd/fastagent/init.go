package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// scaffoldFile is one file fastagent init writes.
type scaffoldFile struct {
	path    string
	mode    os.FileMode
	content string
}

// scaffold is the example workspace: every part of a definition, small
// enough to read in a minute, and working as written.
var scaffold = []scaffoldFile{
	{path: "persona.md", mode: 0o644, content: `You are Scout, a helpful assistant for this project.

You answer briefly and precisely, say what you changed and why, and ask before
doing anything that cannot be undone.
`},
	{path: "AGENTS.md", mode: 0o644, content: `# Project notes for the agent

fastagent puts this file in the system prompt on every turn (edits apply on
the next turn), followed by every AGENTS.md from the working directory up to
the filesystem root.

- Describe the project here: what it is, how it is laid out, its conventions.
- Say how to build and test it, e.g. ` + "`make test`" + `.
`},
	{path: "skills/summarize/SKILL.md", mode: 0o644, content: `---
name: summarize
description: Summarize files or a folder into a short bullet list.
---

# Summarize

1. Read the files the user names with the read tool (list a folder with bash
   ` + "`ls`" + ` first).
2. Write at most five bullets: what it is, what matters, what to watch out for.
3. Quote file paths exactly.
`},
	{path: "tools/current_time.yaml", mode: 0o644, content: `# A workspace tool: this manifest plus any executable. The tool's name is the
# file name. The arguments arrive as one JSON object on stdin; what the
# command prints on stdout is the result. A non-zero exit is an error result.
description: Current date and time in a time zone. Use it whenever today's date or the time matters.
parameters:
  type: object
  properties:
    timezone:
      type: string
      description: IANA time zone such as Europe/Paris (default UTC)
  additionalProperties: false
# A list runs the program directly (a relative path is relative to tools/);
# a string runs with bash -c in the working directory.
command: [./current_time.sh]
timeout: 10s
# Safe to retry: reading the clock has no side effects.
idempotent: true
`},
	{path: "tools/current_time.sh", mode: 0o755, content: `#!/usr/bin/env bash
# current_time: prints the date and time in a time zone.
# stdin: the arguments as JSON, e.g. {"timezone":"Europe/Paris"}
# stdout: the result the model sees. stderr: shown to the model on failure.
set -euo pipefail

args=$(cat)
# Plain sed keeps the example dependency-free; use jq or a script language
# for anything richer.
tz=$(printf '%s' "$args" | sed -n 's/.*"timezone":"\([^"]*\)".*/\1/p')
tz=${tz:-UTC}

if [[ ! $tz =~ ^[A-Za-z0-9_+/-]+$ ]] ||
  { [[ $tz != UTC && -d /usr/share/zoneinfo ]] && [[ ! -f /usr/share/zoneinfo/$tz ]]; }; then
  echo "unknown time zone: $tz (use an IANA name such as Europe/Paris)" >&2
  exit 1
fi
TZ=$tz date '+%Y-%m-%d %H:%M:%S %Z (%A)'
`},
	{path: "fastagent.yaml", mode: 0o644, content: `# Settings of this agent. Every key is optional; unknown keys are errors, so
# a typo stops the start with the file, the key and the reason.

# The model as provider/model (openai, anthropic, ollama, gemini, bedrock… docs/providers.md). FASTAGENT_MODEL
# overrides it; API keys come from the environment (OPENAI_API_KEY, …).
# model: openai/gpt-4o-mini

# off, minimal, low, medium or high (for models that reason before answering).
thinkingLevel: off

# Built-in coding tools: true (read, bash, edit, write), false, or a list.
codingTools: true

# Where the HTTP API listens.
http:
  host: 127.0.0.1
  port: 8787

# Let the agent schedule its own follow-up turns (wake and unwake tools).
selfSchedule: false

# Per-tool settings by tool name: timeout, maxAttempts (retries of an
# idempotent tool), idempotent, requiresApproval, deferred.
tools:
  current_time:
    maxAttempts: 3

# Worker environment variables passed to bash and workspace tools; nothing
# else of the worker's environment reaches them.
# env: [GITHUB_TOKEN]
`},
	{path: ".gitignore", mode: 0o644, content: `# fastagent machine state (sessions, embedded Temporal) and local secrets
.fastagent/
.secrets/
.env
`},
}

func newInit(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "init [dir]",
		Short: "Create an example agent workspace (persona, AGENTS.md, a skill, a tool, fastagent.yaml)",
		Long: "Writes a small working agent definition into dir (default: the --dir workspace, i.e. the current folder).\n" +
			"dir must be empty or not exist yet (a .git folder is allowed).",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError("init takes at most one argument, the folder to create the workspace in")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := g.dir
			if len(args) == 1 {
				dir = args[0]
			}
			return runInit(dir, cmd.OutOrStdout())
		},
	}
}

func runInit(dir string, out io.Writer) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return failure("%w", err)
	}
	entries, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		if st, serr := os.Stat(abs); serr == nil && !st.IsDir() {
			return usageError("%s is a file, not a folder", abs)
		}
		return failure("%w", err)
	default:
		var names []string
		for _, e := range entries {
			if e.Name() != ".git" {
				names = append(names, e.Name())
			}
		}
		if len(names) > 0 {
			return usageError("%s is not empty (it has %s); init only writes into an empty folder so nothing is overwritten — pass a new one, e.g. fastagent init my-agent", abs, listSome(names, 3))
		}
	}
	for _, f := range scaffold {
		p := filepath.Join(abs, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return failure("%w", err)
		}
		fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return failure("%w", err)
		}
		if _, err := io.WriteString(fh, f.content); err != nil {
			fh.Close()
			return failure("write %s: %w", p, err)
		}
		if err := fh.Close(); err != nil {
			return failure("write %s: %w", p, err)
		}
	}
	rel := dir
	if r, err := filepath.Rel(".", abs); err == nil {
		rel = r
	}
	fmt.Fprintf(out, "Created an agent workspace in %s:\n", abs)
	for _, f := range scaffold {
		fmt.Fprintf(out, "  %s\n", f.path)
	}
	fmt.Fprintf(out, `
Next:
  cd %s
  fastagent tool current_time '{"timezone":"Europe/Paris"}'   # run the example tool
  fastagent info                                              # what the agent is made of
  export FASTAGENT_MODEL=openai/gpt-4o-mini OPENAI_API_KEY=…   # or set model: in fastagent.yaml
  fastagent dev
`, rel)
	return nil
}

func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
