package workspace

import (
	"fmt"
	"strings"
	"time"
)

// DefaultIdentity is the identity line persona.md replaces.
const DefaultIdentity = "You are fastagent, a capable assistant that gets work done in the user's workspace."

// engineBase follows the identity in segment 1.
const engineBase = `Use the tools you are given when they help: read files before changing them, keep edits small and exact, and run commands to check your work. When a tool returns an error, read it and correct the call. Answer in plain, direct language; say what you did and what you found.`

// SystemPrompt assembles the four segments: engine base + identity, project
// context (AGENTS.md files), skills listing, runtime context (working
// directory only — no date line, which would invalidate the provider's
// prefix cache every day).
func (d *Definition) SystemPrompt() string {
	var segs []string

	identity := DefaultIdentity
	if d.Persona != "" {
		identity = d.Persona
	}
	base := identity + "\n\n" + engineBase
	if d.hasDeferred() {
		base += "\n\nMore tools exist than are listed; call search_tools with a keyword to activate the ones you need."
	}
	segs = append(segs, base)

	if len(d.ContextFiles) > 0 {
		var b strings.Builder
		b.WriteString("# Project context")
		for _, f := range d.ContextFiles {
			fmt.Fprintf(&b, "\n\n## %s\n\n%s", f.Path, f.Content)
		}
		segs = append(segs, b.String())
	}

	var listed []Skill
	for _, s := range d.Skills {
		if !s.DisableModelInvocation {
			listed = append(listed, s)
		}
	}
	if len(listed) > 0 {
		var b strings.Builder
		b.WriteString("# Skills\n\nEach skill is a SKILL.md with instructions; read it with the read tool when the task matches its description.\n")
		for _, s := range listed {
			fmt.Fprintf(&b, "\n- %s (%s): %s", s.Name, s.Path, s.Description)
		}
		segs = append(segs, b.String())
	}

	segs = append(segs, "# Runtime\n\nWorking directory: "+d.Workspace.Dir)
	return strings.Join(segs, "\n\n") + "\n"
}

func (d *Definition) hasDeferred() bool {
	for _, t := range d.Tools {
		if t.Tool.Spec().Deferred {
			return true
		}
	}
	return false
}

func timeDuration(d Duration) time.Duration { return time.Duration(d) }
