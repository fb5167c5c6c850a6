//go:build !linux

package tools

var noOpenat2 bool
