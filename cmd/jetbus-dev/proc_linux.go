package main

import "syscall"

// sysProcAttr puts a child in its own process group (a terminal's Ctrl-C reaches it only
// through jetbus-dev's orderly stop) and has the kernel send it SIGTERM if jetbus-dev dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
