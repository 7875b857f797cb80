"""kgroup: an asyncio-native Kafka group membership client."""
