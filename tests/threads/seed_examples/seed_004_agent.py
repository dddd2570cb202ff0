# Seed 004's use of UserInfoMemory with a ChatAgent, as the seed shows it; only import lines
# changed: the cloud client and credential come from tests/threads/seed_examples/cloud.py (a
# scripted client in the cloud client's place), the rest from agentkeep, and the provider from
# its fixture module. tests/threads/test_seed_examples.py checks the part below the marker is the
# seed's text, when the seeds are present.
from tests.threads.seed_examples.seed_004_user_info_memory import UserInfoMemory

# --- seed code ---
import asyncio
from agentkeep import ChatAgent
from tests.threads.seed_examples.cloud import AzureAIAgentClient
from tests.threads.seed_examples.cloud import AzureCliCredential

async def main():
    async with AzureCliCredential() as credential:
        chat_client = AzureAIAgentClient(async_credential=credential)

        # Create the memory provider
        memory_provider = UserInfoMemory(chat_client)

        # Create the agent with memory
        async with ChatAgent(
            chat_client=chat_client,
            instructions="You are a friendly assistant. Always address the user by their name.",
            context_providers=memory_provider,
        ) as agent:
            # Create a new thread for the conversation
            thread = agent.get_new_thread()

            print(await agent.run("Hello, what is the square root of 9?", thread=thread))
            print(await agent.run("My name is Ruaidhrí", thread=thread))
            print(await agent.run("I am 20 years old", thread=thread))

            # Access the memory component via the thread's context_providers attribute and inspect the memories
            user_info_memory = thread.context_provider.providers[0]
            if user_info_memory:
                print()
                print(f"MEMORY - User Name: {user_info_memory.user_info.name}")
                print(f"MEMORY - User Age: {user_info_memory.user_info.age}")


if __name__ == "__main__":
    asyncio.run(main())
