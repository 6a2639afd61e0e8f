// Initiates the replica set rs0 of deploy/compose.yaml (services mongo1, mongo2, mongo3) and
// waits until it has a primary. Run once by the one-shot service mongo-init:
//
//   mongosh --host mongo1:27017 --file /init-replica-set.js
//
// Idempotent: on an initiated set it only waits for the primary, so `docker compose up` after
// a restart (data in the volumes) passes through it again.
const members = [
  { _id: 0, host: "mongo1:27017", priority: 2 },
  { _id: 1, host: "mongo2:27017", priority: 1 },
  { _id: 2, host: "mongo3:27017", priority: 1 },
];

try {
  rs.status();
  print("rs0: already initiated");
} catch (e) {
  if (e.codeName !== "NotYetInitialized") {
    throw e;
  }
  rs.initiate({ _id: "rs0", members: members });
  print("rs0: initiated");
}

const deadline = Date.now() + 60 * 1000;
while (!db.hello().primary) {
  if (Date.now() > deadline) {
    throw new Error("rs0: no primary after 60s");
  }
  sleep(500);
}
print("rs0: primary " + db.hello().primary);
