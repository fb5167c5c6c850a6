//go:build !linux

package tools

import (
	"errors"
	"os"
)

var errNoOpenat2 = errors.New("openat2 unavailable")

func openat2Beneath(int, string, int) (int, error) { return -1, errNoOpenat2 }

func openedPath(*os.File) (string, bool) { return "", false }

func onProcFS(*os.File) bool { return false }
