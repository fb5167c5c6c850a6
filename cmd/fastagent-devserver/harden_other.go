//go:build !linux

package main

// harden does nothing on this system.
func harden() {}
