// a comment mentioning publish but no call
bus.publish('orders.created.v1', {});
bus.publish("users.signedup", {}, { headers: { 'x-ok': '1' } });
