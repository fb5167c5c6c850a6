#!/bin/sh
# Reads {"event":"before_tool","tool":{"name":"bash","args":{"command":…}},…}
# on stdin and answers one JSON object on stdout.
in=$(cat)
case "$in" in
  *'rm -rf'*|*mkfs*|*'dd if='*|*'git push'*)
    echo '{"decision":"deny","reason":"destructive or outward commands (rm -rf, mkfs, dd, git push) are not allowed here; say what you wanted to do and why"}' ;;
  *)
    echo '{"decision":"allow"}' ;;
esac
