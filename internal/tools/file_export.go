package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/fastagent/fastagent/agent"
)

// Helpers for tools and channels outside this package that move workspace
// files to or from another system (a chat platform), by the same
// confinement rules as read and write.

// FileTool is implemented by a tool defined outside this package (a
// channel's slack_send_file) that reads or writes workspace files itself:
// the loader gives it the agent's protected list — the one read, write and
// the sandbox use — with WithProtected.
type FileTool interface {
	WithProtected(protected []Protected) agent.Tool
}

// ReadWorkspaceFile reads p (relative to the working directory dir, or
// absolute inside it) as the read tool would: no escape from dir, no
// Secret path (the state dir, .env), regular files of at most maxBytes
// only. It returns the contents and the path relative to dir; a non-nil
// result is an error for the model.
func ReadWorkspaceFile(ctx context.Context, dir, p string, protected []Protected, maxBytes int64) ([]byte, string, *agent.ToolResult, error) {
	realDir, err := workDir(dir)
	if err != nil {
		return nil, "", nil, err
	}
	path, err := resolvePath(dir, realDir, p)
	if err != nil {
		r := errorResult("%v", err)
		return nil, "", &r, nil
	}
	if pr, ok := protectedBy(protected, path); ok && pr.Secret {
		r := errorResult("%s is not readable by the agent (%s)", p, pr.Reason)
		return nil, "", &r, nil
	}
	rel, relErr := filepath.Rel(realDir, path)
	if relErr != nil || rel == "." {
		r := errorResult("%s is not a file", p)
		return nil, "", &r, nil //nolint:nilerr // a path outside the workspace is a tool error result, not a Go error
	}
	hookBeforeOpen()
	rt := &readTool{opts: Options{Read: ReadOptions{MaxFileBytes: maxBytes}}}
	data, res := rt.load(ctx, realDir, rel, p, protected)
	if res != nil {
		return nil, "", res, nil
	}
	return data, filepath.ToSlash(rel), nil, nil
}

// WriteWorkspaceFile writes data to rel, a clean relative path inside the
// working directory dir, creating missing parent directories. No symbolic
// link is followed (a link in the way fails the write) and a file with
// more than one hard link is refused, so the write cannot land outside dir.
// The file gets mode perm.
func WriteWorkspaceFile(dir, rel string, data []byte, perm os.FileMode) error {
	realDir, err := workDir(dir)
	if err != nil {
		return err
	}
	if rel = filepath.Clean(rel); filepath.IsAbs(rel) || rel == "." || !within(realDir, filepath.Join(realDir, rel)) {
		return fmt.Errorf("tools: %q is not a path inside the working directory", rel)
	}
	f, err := openForWrite(realDir, rel, os.O_WRONLY, true, true, nil)
	if err != nil {
		return fmt.Errorf("tools: write %s: %w", rel, err)
	}
	defer f.Close()
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("tools: write %s: %w", rel, err)
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("tools: write %s: %w", rel, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("tools: write %s: %w", rel, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("tools: write %s: %w", rel, err)
	}
	return nil
}

// ErrSecretFile is returned by ReadPromptFile for a file that is, once
// opened, one of the secret paths or a file of /proc.
var ErrSecretFile = errors.New("it leads to a secrets file, the state dir or a process's files in /proc (through a symbolic link?), which never enter the prompt")

// ReadPromptFile reads a file the loader copies into the system prompt
// (persona.md, AGENTS.md, SKILL.md) — files the agent's own tools may
// write with selfEdit. Symbolic links are followed (the operator may have
// made one), but the file opened must be a regular file (opened
// non-blocking: a FIFO does not hang the load) of at most maxBytes, and,
// where it is once opened (not where its name pointed before), not inside
// a Secret entry of protected nor in /proc: a link to .env, the state dir
// or /proc/self/environ (which the worker, not the tool that made the
// link, would read) never brings a secret into the prompt.
func ReadPromptFile(path string, protected []Protected, maxBytes int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("it is %s, not a regular file", fileKind(st.Mode()))
	case st.Size() > maxBytes:
		return nil, fmt.Errorf("it is %s, more than %s", FormatSize(int(st.Size())), FormatSize(int(maxBytes)))
	case onProcFS(f):
		return nil, ErrSecretFile
	}
	var secrets []Protected
	for _, p := range protected {
		if p.Secret {
			secrets = append(secrets, p)
		}
	}
	where, ok := openedPath(f)
	if !ok {
		// No /proc: judge by the name, links resolved.
		if where, err = filepath.EvalSymlinks(path); err != nil {
			return nil, err
		}
	}
	if _, hit := protectedBy(secrets, where); hit {
		return nil, ErrSecretFile
	}
	b, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > maxBytes {
		return nil, fmt.Errorf("it grew past %s while being read", FormatSize(int(maxBytes)))
	}
	return b, nil
}
