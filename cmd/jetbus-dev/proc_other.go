//go:build !linux && !windows

package main

import "syscall"

// sysProcAttr puts a child in its own process group: a terminal's Ctrl-C reaches it only
// through jetbus-dev's orderly stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
