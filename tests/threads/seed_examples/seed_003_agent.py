# Seed 003's use of RedisChatMessageStore with a ChatAgent, as the seed shows it (notebook style,
# with a top-level await); only import lines changed: the cloud client and credential come from
# tests/threads/seed_examples/cloud.py (a scripted client in the cloud client's place), the rest
# from agentkeep, and the store from its fixture module. tests/threads/test_seed_examples.py runs
# it and checks the part below the marker is the seed's text, when the seeds are present.
from tests.threads.seed_examples.seed_003_redis_store import RedisChatMessageStore

# --- seed code ---
from tests.threads.seed_examples.cloud import AzureCliCredential
from agentkeep import ChatAgent
from tests.threads.seed_examples.cloud import AzureOpenAIChatClient

# Create the chat agent with custom message store factory
agent = ChatAgent(
    chat_client=AzureOpenAIChatClient(
        endpoint="https://<myresource>.openai.azure.com",
        credential=AzureCliCredential(),
        ai_model_id="gpt-4o-mini"
    ),
    name="Joker",
    instructions="You are good at telling jokes.",
    chat_message_store_factory=lambda: RedisChatMessageStore(
        redis_url="redis://localhost:6379"
    )
)

# Use the agent with persistent chat history
thread = agent.get_new_thread()
response = await agent.run("Tell me a joke about pirates", thread=thread)
print(response.text)
