# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 12 · Atendendo muitas requisições: o cache paginado e o batching contínuo
#
# **Objetivo de aprendizagem.** Ver para onde vai a memória KV de um lote de requisições reais em três layouts: (a)
# um cache estático por requisição, dimensionado para a mais longa, (b) um cache dinâmico por requisição, (c) blocos
# de um cache paginado compartilhado, o layout que o próprio `model.generate_batch(...)` do transformers usa. Comparar
# os bytes reservados com os bytes que guardam tokens ocupados, observar blocos sendo entregues, devolvidos,
# compartilhados e recusados, e cronometrar `generate_batch` contra um `generate` por requisição.
#
# **Além do guia.** O guia de cache (e os notebooks 00-11) atende uma requisição por vez. Este notebook vai além dele:
# o batching contínuo é uma parte separada do transformers
# (`transformers.generation.continuous_batching`), então não há aqui uma seção do guia correspondente.
#
# **Como é medido.** `kvlab.watch(model)` faz com que o gerenciador iniciado por `generate_batch` crie um
# `InstrumentedPagedAttentionCache`, uma subclasse do `PagedAttentionCache` do transformers que chama os próprios
# métodos do transformers e só lê as tabelas de blocos depois (os tokens são os mesmos do `generate_batch` puro:
# `tests/caches/test_paged.py`).

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import os
import warnings

import ipywidgets as widgets
import torch
from transformers import ContinuousBatchingConfig, DynamicCache, GenerationConfig, StaticCache

import kvlab
from kvlab.i18n import marks, number, percent
from kvlab.live import live
from kvlab.measure.batching import batching_row
from kvlab.measure.paged import paged_steps, paged_summary
from kvlab.plots.blocks import plot_block_timeline, plot_layouts
from kvlab.predictions import score
from kvlab.recording.slots import waste_pct
from kvlab.serving import layout_rows, load_workload, request_lengths

warnings.filterwarnings("ignore", message=".*past_key_values.*")
# o batching contínuo roda seu loop numa thread de fundo; uma thread do torch o mantém estável numa CPU compartilhada
torch.set_num_threads(1)
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # execuções cronometradas mais curtas na suíte de testes; as saídas verificadas valem de qualquer forma
model, tokenizer = kvlab.load("smollm2")
workload = load_workload(tokenizer)  # data/requests/chat_requests.json, pelo chat template do SmolLM2
print(f"{len(workload)} requisições, comprimentos dos prompts {workload.prompt_lengths}, "
      f"respostas limitadas a {workload.max_new_tokens} tokens novos")

# %% [markdown]
# ## 1. O batching contínuo do transformers, do jeito que você o chamaria
#
# `generate_batch` recebe uma lista de prompts em ids de token, põe todos em uma fila e executa um forward por passo
# sobre todas as requisições em andamento: os prompts das requisições novas e o próximo token das requisições em
# execução dividem o mesmo lote (a seção 3 imprime quantas requisições estiveram em andamento ao mesmo tempo, e a
# seção 5, os forwards em lote e com uma requisição por vez). O cache KV é um `PagedAttentionCache`
# (`transformers/generation/continuous_batching/cache.py`, 5.25): um único tensor dividido em blocos de `page_size`
# posições de token, com as chaves e os valores de todas as camadas para esses tokens (a seção 3 imprime os bytes de
# um bloco). `num_blocks` fixa o orçamento de memória. A implementação de atenção aqui é `"paged|eager"`: o
# continuous batching só troca para um kernel flash quando o modelo está em meia precisão e o flash attention está
# instalado, e transforma um `"eager"` simples em `"paged|eager"` (`switch_to_cb_friendly_attn` em
# `continuous_batching/continuous_api.py`); este modelo é float32, numa CPU. A chamada está na seção 3, dentro de
# `kvlab.watch`; sem a linha do `with`, é transformers puro.

# %% [markdown]
# ## 2. Uma previsão
#
# **Preveja primeiro.** Cada requisição da carga de trabalho recebe no máximo 24 tokens novos. Dê a cada requisição
# seu próprio cache estático dimensionado para a requisição mais longa desta carga de trabalho: o prompt mais longo
# dela mais 24 posições. Que fração de todas essas posições reservadas, em porcentagem, não vai guardar nenhum token
# quando as requisições terminarem? Digite-a abaixo; ela é conferida na seção 4.

# %%
guess = None  # % das posições estáticas por requisição que ficam vazias: seu palpite

# %% [markdown]
# ## 3. A carga de trabalho inteira, observada
#
# Todas as oito requisições, com respostas de até 24 tokens, dentro de `kvlab.watch`. O orçamento é de 24 blocos de 16
# tokens, menos do que as oito requisições precisam ao mesmo tempo, então o trace mostra o que o transformers faz
# quando os blocos acabam.

# %%
model.set_attn_implementation("paged|eager")
generation_config = GenerationConfig(max_new_tokens=workload.max_new_tokens, do_sample=False,
                                     eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
with kvlab.watch(model) as watch:
    outputs = model.generate_batch(
        inputs=workload.input_ids,
        generation_config=generation_config,
        continuous_batching_config=ContinuousBatchingConfig(page_size=16, num_blocks=24, max_batch_tokens=512),
    )
trace = watch.trace
answers = [len(outputs[f"req_{i}"].generated_tokens) for i in range(len(workload))]
for name, output_id in zip(workload.ids, outputs):
    print(f"{name:8} {output_id}: {len(outputs[output_id].generated_tokens):2} tokens "
          f"{tokenizer.decode(outputs[output_id].generated_tokens)[:60]!r}")

# %% [markdown]
# Os comprimentos dos prompts e das respostas (determinísticos: decodificação greedy, conferido):

# %%
# NBVAL_CHECK_OUTPUT
print("tokens do prompt:", workload.prompt_lengths)
print("tokens da resposta:", answers)
held = request_lengths(workload.prompt_lengths, answers)
print("tokens no cache de cada requisição quando ela termina (prompt + resposta - 1):", held)

# %% [markdown]
# ### O que o trace registrou
#
# O trace fala o mesmo vocabulário de todos os outros caches: `cache_bytes` é o armazenamento do pool inteiro, alocado
# de antemão; `slots_allocated` conta as posições dos blocos entregues às requisições, `slots_live`, as posições que
# guardam um token, e `slots_masked`, o resto vazio desses blocos (o último bloco de cada requisição, parcialmente
# preenchido).

# %%
# NBVAL_CHECK_OUTPUT
meta = trace.meta["paged"]
print(f"pool: {meta['num_blocks']} blocos de {meta['page_size']} tokens (+{meta['trash_blocks']} "
      f"blocos de descarte que o transformers reserva para padding), {number(meta['bytes_per_block'])} "
      f"B por bloco, {number(meta['storage_bytes'])} B de armazenamento")
print("bytes do trace = armazenamento:", trace.summary()["peak_bytes"] == watch.caches[0].cache_tensor.untyped_storage().nbytes())

# %% [markdown]
# O escalonamento depende de como as requisições esbarram no orçamento; as linhas abaixo são impressas a partir do
# trace desta execução (qual requisição esperou ou foi preemptada pode mudar com a composição do lote, por isso elas
# não são conferidas).

# %%
summary = paged_summary(trace)
rows = paged_steps(trace)
waited = sorted({rid for r in rows for rid in r["refused"]})
preempted = [rid for r in rows for rid in r["preempted"]]
print(f"{summary['forwards']} forwards; no máximo {summary['peak_requests']} requisições em "
      f"andamento e {summary['peak_blocks_in_use']} de {meta['num_blocks']} blocos em uso")
if waited:
    print(f"requisições que tiveram blocos recusados ao menos uma vez (esperaram na fila): {waited}")
else:
    print("requisições que tiveram blocos recusados ao menos uma vez (esperaram na fila): nenhuma")
if preempted:
    print(f"requisições preemptadas (blocos liberados, de volta à fila, prompt recalculado): {preempted}")
else:
    print("requisições preemptadas (blocos liberados, de volta à fila, prompt recalculado): nenhuma")
print("tokens de prompt reutilizados dos blocos de outra requisição "
      f"(compartilhamento de prefixo): {summary['prefix_hit_tokens']}")
print(f"fragmentação interna: {marks(str(summary['fragmentation_pct_mean']))}% "
      "das posições entregues vazias, na média dos forwards")

# %%
plot_block_timeline(trace)

# %% [markdown]
# Cada coluna é um forward. Uma célula na cor de uma requisição é um bloco que essa requisição guarda; os blocos
# roxo-escuros ("em cache") são blocos completos que o transformers mantém depois que a requisição deles terminou, para
# que uma requisição posterior com o mesmo prefixo possa reutilizá-los (`ContinuousBatchingConfig(allow_block_sharing=True)`
# é o padrão, e `PagedAttentionCache.mark_complete_blocks` registra cada bloco completo para reutilização). O chat
# template do SmolLM2 começa todo prompt sem turno de sistema com o mesmo turno ("You are a helpful AI assistant named
# SmolLM, trained by Hugging Face", no `chat_template.jinja` do modelo): os tokens de prompt reutilizados estão
# impressos acima; as células cinza-claras estão livres. No painel de baixo, um triângulo preto marca um forward em
# que uma requisição pediu blocos e foi recusada (ela continua na fila), e uma cruz, uma preempção.
#
# A fragmentação interna impressa acima é uma média sobre todos os forwards da execução: em cada forward, as posições
# vazias dos blocos entregues naquele momento, enquanto as requisições ainda estavam crescendo. A seção 4, em vez
# disso, toma cada requisição no seu comprimento final; os dois números medem momentos diferentes da mesma execução.

# %% [markdown]
# ## 4. Todos os layouts, as mesmas requisições
#
# Agora os três layouts para os comprimentos medidos acima, no comprimento final de cada requisição. O cache estático
# é dimensionado com `max_cache_len` = prompt mais longo + 24; as linhas paginadas usam vários tamanhos de bloco (256
# é o `page_size` padrão do transformers: `ContinuousBatchingConfig` em
# `transformers/generation/configuration_utils.py`, 5.25).

# %%
bytes_per_token = meta["bytes_per_block"] // meta["page_size"]  # chaves + valores, 30 camadas, float32
max_cache_len = max(workload.prompt_lengths) + workload.max_new_tokens
budget = meta["num_blocks"] * meta["bytes_per_block"]  # o pool da execução acima
layouts = layout_rows(held, bytes_per_token, max_cache_len=max_cache_len, block_sizes=(4, 16, 64, 256),
                      budget_bytes=budget)

# %%
# NBVAL_CHECK_OUTPUT
print(f"{number(bytes_per_token)} B por token; max_cache_len estático = {max_cache_len}; orçamento {number(budget)} B")
print(f"{'layout':12} {'B guardados':>12} {'B ocupados':>12} {'desp. %':>8} {'cabem no orç.':>14}")
for row in layouts:  # `layout` é a chave da linha, `name` as mesmas palavras no idioma do leitor
    print(f"{row['name']:12} {number(row['bytes_held']):>12} {number(row['bytes_live']):>12} "
          f"{number(row['waste_pct'], 1):>8} {row['fit_in_budget']:>14}")

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess, layouts[0]["waste_pct"], unit="%", kind="share"))

# %% [markdown]
# ### As linhas estática e dinâmica, medidas em caches reais
#
# A tabela é aritmética sobre os comprimentos medidos. Para conferi-la, os tokens finais de cada requisição (prompt +
# resposta, menos o último token, que nunca volta a entrar no modelo) passam por um forward e vão para o cache que
# cada layout lhe dá: `StaticCache(config=..., max_cache_len=...)` e `DynamicCache(config=...)`, registrados por
# `kvlab.watch`. A linha paginada com 16 é lida do trace acima: os blocos que cada requisição guardava no seu último
# forward.

# %%
model.set_attn_implementation("sdpa")
measured = {"static": [0, 0], "dynamic": [0, 0]}  # bytes guardados, bytes ocupados
for prompt_ids, output_id in zip(workload.input_ids, outputs):
    tokens = torch.tensor([prompt_ids + outputs[output_id].generated_tokens[:-1]])
    for layout, cache in (("static", StaticCache(config=model.config, max_cache_len=max_cache_len)),
                          ("dynamic", DynamicCache(config=model.config))):
        with kvlab.watch(model) as cache_watch, torch.no_grad():
            model(input_ids=tokens, past_key_values=cache)
        s = cache_watch.trace.summary()
        measured[layout][0] += s["final_bytes"]
        measured[layout][1] += s["final_bytes"] * s["slots_live"] // s["slots_allocated"]
last_blocks = {}
for r in paged_steps(trace):
    last_blocks.update({rid: len(blocks) for rid, blocks in r["block_tables"].items()})
paged_16 = sum(last_blocks.values()) * meta["bytes_per_block"]
handed_out, live_slots = sum(last_blocks.values()) * meta["page_size"], sum(held)  # cada requisição no seu último forward

# %%
# NBVAL_CHECK_OUTPUT
by_name = {row["layout"]: row for row in layouts}
for layout, (held_bytes, live_bytes) in measured.items():
    print(f"{by_name[layout]['name']:8} medido: guardados {number(held_bytes)} B, ocupados {number(live_bytes)} "
          f"B; tabela: {number(by_name[layout]['bytes_held'])} / {number(by_name[layout]['bytes_live'])}")
print(f"{by_name['paged 16']['name']} medido no trace: {number(paged_16)} "
      f"B; tabela: {number(by_name['paged 16']['bytes_held'])}")
print(f"{by_name['paged 16']['name']}, cada requisição no seu último forward: {handed_out} posições "
      f"entregues, {live_slots} ocupadas, "
      f"{percent(waste_pct(handed_out - live_slots, handed_out, digits=1), 1)} vazias (o desp. % da tabela)")

# %% [markdown]
# As linhas paginadas contam blocos inteiros: com 16, cada requisição desperdiça o que sobra do seu último bloco, e
# isso depende de onde cai o seu comprimento final (80 tokens preenchem exatamente cinco blocos; 66 deixam vazias 14
# posições do quinto). É por isso que os 7,7% daqui diferem da fragmentação impressa na seção 3, que é uma média
# sobre os forwards.

# %%
plot_layouts(layouts)

# %% [markdown]
# ### Referência externa (não medida aqui)
#
# | fonte | layout | memória KV desperdiçada |
# |---|---|---|
# | Kwon et al. 2023, *Efficient Memory Management for Large Language Model Serving with PagedAttention* (vLLM), medido nos traces de serviço deles (fonte: Kwon et al. 2023, o artigo do vLLM) | sistemas anteriores, que reservam memória contígua para o comprimento máximo de cada requisição | 60-80% |
# | o mesmo artigo (fonte: Kwon et al. 2023, o artigo do vLLM) | blocos paginados (vLLM) | menos de 4% |
#
# Estes são os números do artigo, em GPUs, com conversas reais longas e o seu próprio tamanho de bloco; servem apenas
# para comparação. Duas diferenças importam ao lado da tabela acima. A linha de base do artigo reservava o comprimento
# máximo de cada requisição, enquanto a linha estática deste notebook é dimensionada para a carga de trabalho (o seu
# prompt mais longo mais 24); a célula abaixo a dimensiona do jeito do artigo, no comprimento máximo do SmolLM2.

# %%
# NBVAL_CHECK_OUTPUT
max_positions = model.config.max_position_embeddings  # a sequência mais longa que o SmolLM2 aceita
at_max = layout_rows(held, bytes_per_token, max_cache_len=max_positions, block_sizes=())[0]
print(f"estático, {number(max_positions)} posições reservadas por requisição: "
      f"{number(at_max['bytes_held'])} B guardados, {percent(at_max['waste_pct'], 1)} de desperdício "
      f"(dimensionado para a carga, {max_cache_len} posições: {percent(layouts[0]['waste_pct'], 1)})")

# %% [markdown]
# Reservar o máximo do SmolLM2, 8.192 posições, para cada uma dessas oito requisições desperdiçaria 99,2% da memória,
# acima dos 60-80% do artigo para a sua linha de base (fonte: Kwon et al. 2023, o artigo do vLLM), porque essas
# requisições são muito mais curtas do que o máximo. A outra diferença: blocos de 16 desperdiçam 7,7% aqui, acima dos
# menos de 4% que o artigo relata para o vLLM (fonte: Kwon et al. 2023, o artigo do vLLM), porque essas requisições
# são curtas (80 tokens no máximo) e o último bloco parcialmente preenchido de cada uma é uma fração maior dela.
#
# Dentro da tabela: um cache dinâmico por requisição não desperdiça nada dentro dos seus tensores (o
# `DynamicLayer.update` do transformers, em `transformers/cache_utils.py`, os aumenta com `torch.cat` exatamente pelos
# tokens novos, com tensores novos a cada passo) e, contado em bytes nos comprimentos finais, é o layout que põe mais
# requisições no orçamento (6, contra 5 para blocos de 4 ou 16). Essa contagem supõe que um servidor conhece o
# comprimento final de cada requisição quando a admite, e ele não conhece; o que o cache paginado acrescenta é um
# único pool fixo do qual os blocos são entregues à medida que as requisições crescem e ao qual voltam quando elas
# terminam — as recusas e a preempção da seção 3. Os blocos paginados limitam o desperdício ao último bloco de cada
# requisição, e quanto menor o bloco, menor esse desperdício: com o `page_size` padrão de 256 do transformers, cada
# uma dessas requisições curtas preenche menos de um terço do seu único bloco, e a linha paginada desperdiça mais do
# que a estática.

# %% [markdown]
# ## 5. Atendê-las juntas é mais rápido do que uma por vez?
#
# A memória é um motivo para processar em lote; o tempo é o outro. `kvlab.measure.batching.batching_row` executa os
# mesmos oito prompts de duas formas, com decodificação greedy e sem parada no fim de sequência, para que as duas
# produzam os mesmos tokens: uma vez por `model.generate_batch(...)` (um `ContinuousBatchingConfig` com um pool
# grande o bastante para todas as requisições ao mesmo tempo, para que ninguém espere) e uma vez como um
# `model.generate(...)` por requisição, cada um com seu próprio DynamicCache. As execuções são repetidas e
# intercaladas (em lote, sequencial, em lote, ...); a
# mediana e o intervalo interquartil (IQR) de cada caminho são impressos.
#
# O que os contadores preveem: uma requisição por vez, cada requisição custa um forward por token novo (seu
# pré-preenchimento, depois um passo de decodificação para cada token seguinte), todos eles levando uma única
# requisição; em lote, um forward por passo leva todas as requisições em andamento, então rodam muito menos forwards
# (as duas contagens são impressas). Menos forwards significam que os pesos são lidos menos vezes, mas cada forward
# em lote faz a aritmética de todas as suas requisições, e, em uma CPU, a atenção paginada roda a implementação
# eager do transformers. O veredito impresso diz se o batching é mais rápido nesta máquina: um intervalo que
# contém 1 significa nenhuma diferença detectável.

# %%
# Não verificado: os tempos dependem da máquina.
new_tokens = 8 if QUICK else workload.max_new_tokens
batching = batching_row(model, workload.input_ids, new_tokens, repeats=1 if QUICK else 3)
print(f"{batching['label']}; mesmos tokens greedy nos dois caminhos: {batching['same_tokens']}")
print(f"forwards: {batching['batched_forwards']} com generate_batch, "
      f"{batching['sequential_forwards']} com um generate por requisição")
for route in ("batched", "sequential"):
    t = batching["timings"][route]  # indexado pela rota; seu rótulo é a rota no idioma do leitor
    print(f"{t['label']:<10} mediana {number(t['median_s'], 2)} s (IQR "
          f"{number(t['q1_s'], 2)}-{number(t['q3_s'], 2)}, {len(t['times_s'])} execuções)")
low, high = batching["speedup_interval"]
print(f"aceleração, sequencial / em lote: {number(batching['speedup'], 2)} ({number(low, 2)}-{number(high, 2)})")
print(batching["verdict"])

# %% [markdown]
# ## 6. Ao vivo: tamanho de bloco e número de requisições
#
# Mexa nos controles: as primeiras *n* requisições da carga de trabalho passam por `generate_batch` (até 8 tokens novos
# cada, um pool de 256 posições de token, ou seja, um número de blocos igual a 256 / tamanho do bloco) e a linha do
# tempo dos blocos é redesenhada com, no título, a fração das posições entregues que ficou vazia.

# %%
def measure_blocks(block_size, requests):
    config = GenerationConfig(max_new_tokens=8, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                              pad_token_id=tokenizer.pad_token_id)
    model.set_attn_implementation("paged|eager")
    with kvlab.watch(model) as w:
        model.generate_batch(inputs=workload.input_ids[:requests], generation_config=config,
                             continuous_batching_config=ContinuousBatchingConfig(
                                 page_size=block_size, num_blocks=256 // block_size, max_batch_tokens=512))
    s = paged_summary(w.trace)
    return plot_block_timeline(w.trace, title=f"{requests} requisições, blocos de {block_size} "
                                              f"tokens: {marks(str(s['fragmentation_pct_mean']))}% "
                                              "das posições entregues vazias")


live(measure_blocks,
     block_size=widgets.Dropdown(options=[4, 8, 16, 32, 64], value=16, description="tamanho do bloco"),
     requests=widgets.IntSlider(value=4, min=1, max=8, continuous_update=False, description="requisições"))

# %% [markdown]
# ## Principais conclusões
#
# - `model.generate_batch(...)` atende muitas requisições com um único `PagedAttentionCache`: um pool fixo de blocos
#   entregues às requisições à medida que elas crescem e devolvidos quando terminam; quando o pool se esgota, as
#   requisições novas esperam, e uma em execução pode ser preemptada e recalculada.
# - Nas mesmas oito requisições, um cache estático por requisição dimensionado para a mais longa deixou vazia a fração
#   impressa na tabela (muito mais quando dimensionado para o comprimento máximo do modelo, como era a linha de base do
#   artigo do vLLM); um cache dinâmico por requisição não deixou nada vazio e, nos comprimentos finais que o servidor
#   não tem como saber de antemão, é o que põe mais requisições no orçamento; os blocos paginados desperdiçam apenas o
#   último bloco de cada requisição, menos com blocos menores, e vêm de um único pool compartilhado que o escalonador
#   entrega e recolhe bloco a bloco.
# - Em lote, cada passo é um forward sobre todas as requisições em andamento, em vez de um por requisição, então rodam
#   muito menos forwards; o veredito impresso na seção 5 diz se, com isso, os mesmos tokens chegaram mais cedo nesta
#   máquina.
# - Os 60-80% contra menos de 4% do artigo do vLLM (fonte: Kwon et al. 2023, o artigo do vLLM) são uma referência
#   externa, medida em outras cargas de trabalho; os números do próprio kvlab estão na tabela.
#
# De volta ao início: [00 · Comece aqui](00_start_here.ipynb),
# ou brinque no [Explorador de Cache](11_cache_explorer.ipynb).
