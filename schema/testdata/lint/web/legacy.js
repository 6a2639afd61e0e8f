// a comment mentioning publish but no call
nc.publish('in.orders.created.v1', data);
js.publish("users.signedup.p0.user-42", data, { headers: { 'x-ok': '1', 'Nats-Msg-Id': 'u-42', 'x-key': 'user-42' } });
