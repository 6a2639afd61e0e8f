// Package changefeed publishes MongoDB change streams into jetbus topics, none lost and none
// doubled, and drains transactional outboxes the same way.
package changefeed
