// a comment mentioning publish but no call
nc.publish('in.orders.created.v1', data);
js.publish("users.signedup.p0.user-42", data, { headers: { 'x-ok': '1', 'Nats-Msg-Id': 'u-42', 'x-key': 'user-42', 'traceparent': '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } });
