package tools

import "time"

// Helpers for command-backed tools defined outside this package (workspace
// tools), so they run commands by the same rules as the bash tool.

// CommandEnv returns the environment for a command: the worker's allowlisted
// variables (PATH, HOME, USER, LANG, LC_*, TERM, TZ, TMPDIR) plus the extra
// names, and nothing else of the worker's environment.
func CommandEnv(extra []string) []string {
	return (&bashTool{opts: Options{Bash: BashOptions{ExtraEnv: extra}}}).env()
}

// KillProcessGroup stops process group pgid as the bash tool does on a
// timeout: SIGTERM, then SIGKILL to whatever is left after grace. waitDone
// delivers the leader's cmd.Wait result, which is returned.
func KillProcessGroup(pgid int, waitDone <-chan error, grace time.Duration) error {
	return killGroup(pgid, waitDone, grace)
}

// WorkDir checks a call's working directory (absolute, existing, a
// directory) and returns its real path.
func WorkDir(dir string) (string, error) { return workDir(dir) }
