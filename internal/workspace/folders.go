package workspace

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// folderIDs remembers which folders the agent's rules were first loaded
// from when the agent dir lies inside the workspace, where tools may write:
// the tool sandbox keeps those folders from being renamed or replaced, and
// the loader refuses to load from a folder that is not the one it started
// with — the defense behind the sandbox's (a folder moved away and
// recreated under the same name, with a fastagent.yaml of its own).
type folderIDs struct {
	mu sync.Mutex
	// agentDir is the agent dir the IDs are of; ws the workspace's own ID
	// (a workspace replaced as a whole is the operator's doing: a tool
	// cannot write its parent).
	agentDir string
	ws       fileID
	ids      []fileID
}

// fileID is a file's identity: device, inode and type.
type fileID struct {
	path     string
	dev, ino uint64
	mode     uint32
}

func statID(path string, follow bool) (fileID, error) {
	var st syscall.Stat_t
	var err error
	if follow {
		err = syscall.Stat(path, &st)
	} else {
		err = syscall.Lstat(path, &st)
	}
	if err != nil {
		return fileID{}, err
	}
	return fileID{path: path, dev: uint64(st.Dev), ino: st.Ino, mode: uint32(st.Mode) & syscall.S_IFMT}, nil //nolint:unconvert // Dev is not uint64 everywhere
}

// chain returns the IDs of the folders from ws.Dir (exclusive) down to
// the agent dir, and whether the agent dir lies inside the workspace.
func chain(ws Workspace) ([]fileID, bool, error) {
	rel, err := filepath.Rel(ws.Dir, ws.AgentDir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, false, nil //nolint:nilerr // outside the workspace: no tool writes there
	}
	var out []fileID
	cur := ws.Dir
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, c)
		id, err := statID(cur, false)
		if err != nil {
			return nil, true, err
		}
		out = append(out, id)
	}
	return out, true, nil
}

// check records the folders on the first load of an agent dir, and on
// later loads refuses when one of them is not the same folder any more.
func (f *folderIDs) check(ws Workspace) error {
	ids, inside, err := chain(ws)
	if !inside {
		return nil
	}
	wsID, wsErr := statID(ws.Dir, true)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil || wsErr != nil {
		if f.agentDir == ws.AgentDir && wsErr == nil {
			return fmt.Errorf("workspace: the agent dir %s was moved or removed since the agent was first loaded from it (%w): "+
				"put the agent's folder back, or restart the worker", ws.AgentDir, err)
		}
		return nil // the load reports the missing folder
	}
	if f.agentDir != ws.AgentDir || f.ws != wsID {
		f.agentDir, f.ws, f.ids = ws.AgentDir, wsID, ids
		return nil
	}
	for i, id := range ids {
		if was := f.ids[i]; id != was {
			what := "replaced"
			if id.mode == syscall.S_IFLNK {
				what = "replaced by a symbolic link"
			}
			return fmt.Errorf("workspace: the folder %s was %s since the agent was first loaded from it "+
				"(it is not the folder the worker started with, so its rules are not loaded): "+
				"a tool or a person moved it; check what is there now, put the agent's folder back or restart the worker to accept it", id.path, what)
		}
	}
	return nil
}
