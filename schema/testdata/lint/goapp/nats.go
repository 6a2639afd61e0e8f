package main

type conn struct{}

func (conn) PublishAsync(subject string, data []byte) error { return nil }

func raw(nc conn) {
	_ = nc.PublishAsync("orders.created.p0", nil)
	_ = nc.PublishAsync("orders.created", nil)
	_ = nc.PublishAsync("in.orders.created", nil)
	_ = nc.PublishAsync("in.orders.created.p2", nil)
}
