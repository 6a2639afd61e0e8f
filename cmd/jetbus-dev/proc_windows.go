package main

import "syscall"

// sysProcAttr: on Windows the children keep jetbus-dev's console; Ctrl-C reaches all three.
func sysProcAttr() *syscall.SysProcAttr { return nil }
