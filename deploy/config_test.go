package deploy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetbus/jetbus/internal/config"
)

// TestDeployConfigIsTheExample: the configuration that compose and Kubernetes run is
// examples/jetbus.yaml with replicas: 3 for every topic and the DLQ — nothing else differs,
// as jetbus's own loader reads them — and its schemas are the example's, byte for byte.
func TestDeployConfigIsTheExample(t *testing.T) {
	example, err := config.Load(config.Options{File: exampleConfig})
	require.NoError(t, err)
	deployed, err := config.Load(config.Options{File: deployConfig})
	require.NoError(t, err, "jetbus's loader refuses %s", deployConfig)

	require.NotEmpty(t, deployed.Topics)
	for i, tc := range deployed.Topics {
		assert.Equal(t, 3, tc.Replicas, "topics[%d] (%s): replicas", i, tc.Name)
		if i < len(example.Topics) {
			deployed.Topics[i].Replicas = example.Topics[i].Replicas
		}
	}
	assert.Equal(t, 3, deployed.DLQ.Replicas, "dlq.replicas")
	deployed.DLQ.Replicas = example.DLQ.Replicas
	// Paths resolve against each file's directory; the schemas are compared below.
	deployed.File, deployed.Schemas = example.File, example.Schemas
	assert.Equal(t, example, deployed, "%s differs from %s in more than replicas", deployConfig, exampleConfig)

	assert.Equal(t, dirFiles(t, exampleSchema), dirFiles(t, deploySchemas), "%s is not a copy of %s", deploySchemas, exampleSchema)
}
