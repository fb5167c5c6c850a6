package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/workspace"
)

// addSkillOptions are the flags of `add skill`.
type addSkillOptions struct {
	path, name string
	force      bool
}

func newAddSkill(g *globals) *cobra.Command {
	o := &addSkillOptions{}
	cmd := &cobra.Command{
		Use:   "skill <dir | git URL>",
		Short: "Copy a skill (a folder with SKILL.md) into skills/<name>",
		Long: "Copies a skill folder — a local folder, or a git repository cloned with git (https://, ssh, file://) — into\n" +
			"skills/<name> in the agent dir, after checking its SKILL.md front matter (name, description).\n" +
			"<name> is the front matter's name, else the folder's. An existing skill is never overwritten without --force.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAddSkill(commandContext(cmd), g, o, args[0], cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.path, "path", "", "the skill's folder inside the source (e.g. skills/pdf in a repository of skills)")
	f.StringVar(&o.name, "name", "", "install under this name instead of the front matter's")
	f.BoolVar(&o.force, "force", false, "replace an existing skill of the same name")
	return cmd
}

// isGitURL reports whether src names a repository rather than a folder.
func isGitURL(src string) bool {
	return strings.Contains(src, "://") || strings.HasPrefix(src, "git@") || strings.HasSuffix(src, ".git")
}

func runAddSkill(ctx context.Context, g *globals, o *addSkillOptions, src string, out io.Writer) error {
	dir, err := filepath.Abs(g.dir)
	if err != nil {
		return failure("%w", err)
	}
	agentDir, err := resolveAgentDir(dir, g.agentDir)
	if err != nil {
		return failure("%w", err)
	}
	root, cleanup, err := skillSource(ctx, src)
	if err != nil {
		return err
	}
	defer cleanup()
	if o.path != "" {
		if filepath.IsAbs(o.path) || strings.HasPrefix(filepath.Clean(o.path), "..") {
			return usageError("--path %s must be a folder inside the source", o.path)
		}
		root = filepath.Join(root, o.path)
	}
	b, err := os.ReadFile(filepath.Join(root, "SKILL.md"))
	if err != nil {
		return usageError("%s has no SKILL.md (a skill is a folder with SKILL.md; use --path for a skill inside a repository)", root)
	}
	base := filepath.Base(root)
	if o.path == "" && isGitURL(src) {
		base = strings.TrimSuffix(filepath.Base(strings.TrimRight(src, "/")), ".git")
	}
	skill, err := workspace.ParseSkill(b, base)
	if err != nil {
		return usageError("%s: %w; nothing was written", filepath.Join(root, "SKILL.md"), err)
	}
	if o.name != "" {
		if skill, err = workspace.ParseSkill([]byte("---\nname: "+o.name+"\ndescription: x\n---\n"), o.name); err != nil {
			return usageError("--name: %w", err)
		}
	}
	dest := filepath.Join(agentDir, "skills", skill.Name)
	if err := refuseExisting(dest, o.force); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return failure("%w", err)
	}
	// Copied beside the destination, then renamed over it: a failed copy
	// leaves the old skill in place.
	tmp, err := os.MkdirTemp(filepath.Dir(dest), "."+skill.Name+"-")
	if err != nil {
		return failure("%w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := copySkill(root, tmp); err != nil {
		return usageError("%w; nothing was written", err)
	}
	if err := os.RemoveAll(dest); err != nil {
		return failure("%w", err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return failure("%w", err)
	}
	rel, _ := filepath.Rel(dir, dest)
	fmt.Fprintf(out, "Added skill %s to %s: %s\nfastagent info lists it; the agent sees it from its next turn.\n", skill.Name, rel, skill.Description)
	return nil
}

// skillSource is the folder to add a skill from: src itself, or a shallow
// clone of the git URL src in a temporary folder that cleanup removes.
func skillSource(ctx context.Context, src string) (root string, cleanup func(), err error) {
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		return src, func() {}, nil
	}
	if !isGitURL(src) {
		return "", nil, usageError("%s is neither a folder nor a git URL", src)
	}
	tmp, err := os.MkdirTemp("", "fastagent-skill-")
	if err != nil {
		return "", nil, failure("%w", err)
	}
	cleanup = func() { _ = os.RemoveAll(tmp) }
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	clone := exec.CommandContext(cctx, "git", "clone", "--quiet", "--depth", "1", "--", src, filepath.Join(tmp, "repo"))
	clone.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	if b, err := clone.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, failure("git clone %s: %v\n%s", src, err, strings.TrimSpace(string(b)))
	}
	return filepath.Join(tmp, "repo"), cleanup, nil
}

// copySkill copies the regular files and folders of src into dst (.git
// left out); a symbolic link or special file is refused, as a skill that
// points outside itself.
func copySkill(src, dst string) error {
	from, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer func() { _ = from.Close() }()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	to, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer func() { _ = to.Close() }()
	// Both sides are opened through their roots: a file swapped for a link
	// while the walk runs cannot lead a read or a write outside them.
	return fs.WalkDir(from.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if d.IsDir() && d.Name() == ".git" {
			return fs.SkipDir
		}
		switch {
		case d.IsDir():
			return to.MkdirAll(rel, 0o755)
		case d.Type().IsRegular():
			info, err := from.Lstat(rel)
			if err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return fmt.Errorf("%s is a symbolic link or special file; a skill holds only files and folders", rel)
			}
			b, err := from.ReadFile(rel)
			if err != nil {
				return err
			}
			return to.WriteFile(rel, b, info.Mode().Perm()&0o755|0o644)
		default:
			return fmt.Errorf("%s is a symbolic link or special file; a skill holds only files and folders", rel)
		}
	})
}

// commandContext is the command's context, or Background for a command
// run without one (as tests run them).
func commandContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
