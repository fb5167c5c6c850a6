package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fastagent/fastagent/agent"
)

type writeTool struct {
	locks     *fileLocks
	protected []Protected
}

func (t *writeTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: NameWrite,
		Description: "Write content to a file. Creates the file if it doesn't exist, overwrites it if it does. " +
			"Parent directories are created automatically.",
		Parameters: writeSchema,
	}
}

type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

func (t *writeTool) Run(_ context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	var a writeArgs
	realDir, res, err := prepare(t.Spec(), call, &a)
	if res != nil || err != nil {
		return deref(res), err
	}
	path, err := resolvePath(call.Dir, realDir, a.Path)
	if err != nil {
		return errorResult("%v", err), nil
	}
	if path == realDir {
		return errorResult("%s is the working directory, not a file", a.Path), nil
	}
	if p, ok := protectedBy(t.protected, path); ok {
		return refuseProtected(NameWrite, a.Path, realDir, p), nil
	}
	unlock := t.locks.lock(path)
	defer unlock()
	rel, err := filepath.Rel(realDir, path)
	if err != nil {
		return errorResult("cannot write %s: %v", a.Path, err), nil
	}
	hookBeforeOpen()
	f, err := openForWrite(realDir, rel, os.O_WRONLY, true, true, t.protected)
	if errors.Is(err, errIsDir) {
		return errorResult("%s is a directory, not a file", a.Path), nil
	}
	if err != nil {
		return errorResult("cannot write %s: %v", a.Path, err), nil
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		return errorResult("cannot write %s: %v", a.Path, err), nil
	}
	if _, err := f.Write([]byte(a.Content)); err != nil {
		return errorResult("cannot write %s: %v", a.Path, err), nil
	}
	if err := f.Close(); err != nil {
		return errorResult("cannot write %s: %v", a.Path, err), nil
	}
	return agent.ToolResult{Content: fmt.Sprintf("Successfully wrote %d bytes to %s", len(a.Content), a.Path)}, nil
}
